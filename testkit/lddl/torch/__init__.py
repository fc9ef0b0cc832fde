from .bert import get_bert_pretrain_data_loader
