"""Where the tests' reference files are: tests/fixtures/, inside the repository (tests/fixtures/README.md says
where each came from and how it was made). The one definition every test module imports (`from fixture_paths
import ...`, like `dumpserver`), so that a plain clone has all it needs and no test reads outside it."""

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
# The original BERT generator's (google-research/bert create_pretraining_data.py) instances, inputs, vocabulary.
GOOGLE_REFERENCE = FIXTURES / "google-reference"
REFERENCE_VOCAB = GOOGLE_REFERENCE / "bert-base-uncased-vocab.txt"
REFERENCE_INPUTS = GOOGLE_REFERENCE / "inputs"
# The ILSVRC-2012 synset lists, names and validation labels, to cross-check imagenet_prep/data.
IMAGENET = FIXTURES / "imagenet"
# Real Chinese and Japanese prose: excerpts of Debian's translated manuals (benchmarks/cjktext.py --fixture).
CJK = FIXTURES / "cjk"
