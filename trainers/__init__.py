"""trainers: the thin trainers that show both datasets train end to end (Keras on TensorFlow).

They read the records `wikiprep` and `imagenet_prep` write, through the same schemas; the data
libraries never import them, so preparing data needs neither Keras nor a plotting backend.

Modules:
  loop  what both share: metrics.csv and loss.png, checks of their input, the step loop, seeds
  bert  train_bert: a tiny BERT on a pre-training dataset folder (masked LM + next sentence)
  cnn   train_imagenet: a tiny CNN on the train shards of an ImageNet folder
"""
