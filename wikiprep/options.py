"""The generation options: what, with the text and the vocabulary, decides every BERT instance.

One frozen dataclass, built once by the `create-pretraining-data` command line (whose flags
are made from these fields, with the original's spelling, defaults and help) and once by the
`Pretrain*` tasks. The dataset description in dataset.json and MANIFEST.json derives from it.
"""

from dataclasses import asdict, dataclass, field, fields

from shardkit.errors import PrepError


def _flag(default, help_text: str):
    return field(default=default, metadata={"help": help_text})


@dataclass(frozen=True)
class GenerationOptions:
    """The flags of google-research/bert's create_pretraining_data.py (same names and defaults),
    plus Graphcore's fixed mask count."""

    do_lower_case: bool = _flag(True, "Whether to lower case the input text. Should be True for uncased models "
                                      "and False for cased models.")
    do_whole_word_mask: bool = _flag(False, "Whether to use whole word masking rather than per-WordPiece masking.")
    max_seq_length: int = _flag(128, "Maximum sequence length.")
    max_predictions_per_seq: int = _flag(20, "Maximum number of masked LM predictions per sequence.")
    random_seed: int = _flag(12345, "Random seed for data generation.")
    dupe_factor: int = _flag(10, "Number of times to duplicate the input data (with different masks).")
    masked_lm_prob: float = _flag(0.15, "Masked LM probability.")
    short_seq_prob: float = _flag(0.1, "Probability of creating sequences which are shorter than the maximum length.")
    fixed_mask_count: bool = _flag(False, "Graphcore's count: a full-length sequence gets exactly "
                                          "max_predictions_per_seq masks.")

    def __post_init__(self):
        for f in fields(self):  # plain bool/int/float, whatever number types the caller had (as the original's flags)
            object.__setattr__(self, f.name, f.type(getattr(self, f.name)))

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_object(cls, obj, **overrides) -> "GenerationOptions":
        """Options from the attributes of the same names (an argparse Namespace, a Luigi task), then `overrides`."""
        return cls(**{name: overrides[name] if name in overrides else getattr(obj, name) for name in cls.names()})

    def as_dict(self) -> dict:
        return asdict(self)

    def check(self) -> None:
        if self.max_seq_length < 5:
            raise PrepError(f"max_seq_length={self.max_seq_length}: must be at least 5 ([CLS] A [SEP] B [SEP])")
        if self.max_predictions_per_seq < 0:
            raise PrepError(f"max_predictions_per_seq={self.max_predictions_per_seq}: must be >= 0")
        if self.dupe_factor < 1:
            raise PrepError(f"dupe_factor={self.dupe_factor}: must be >= 1")
        if not 0.0 <= self.masked_lm_prob <= 1.0:
            raise PrepError(f"masked_lm_prob={self.masked_lm_prob}: must be within [0, 1]")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise PrepError(f"short_seq_prob={self.short_seq_prob}: must be within [0, 1]")
