"""The generation options: what, with the text and the vocabulary, decides every BERT instance.

One frozen dataclass, built once by the `create-pretraining-data` command line (whose flags
are made from these fields, with the original's spelling, defaults and help) and once by the
`Pretrain*` tasks. The dataset description in dataset.json and MANIFEST.json derives from it.
"""

from dataclasses import asdict, dataclass, field, fields

from shardkit.errors import PrepError

# The bounds `GenerationOptions` holds the sizes to.
# [CLS] A [SEP] B [SEP] with A and B one token each; shorter, the original fails an assertion.
MIN_SEQ_LENGTH = 5
# A record holds at least 3 bytes per position and 9 per prediction, and the generator's tables
# grow linearly with both (about 200 MB at a million positions): beyond this, a typo, not a dataset.
MAX_SEQ_LENGTH = 1_000_000
MAX_PREDICTIONS_PER_SEQ = 1_000_000

# The Pretrain tasks' defaults (their --num-shards and --seed, and the Makefile's) for what the original's flags do
# not hold: a dataset folder's name says a shard count or seed only when it is not one of these
# (`dataset.folder_name`), so a default run's paths are those of every version. The seed is the original's
# --random_seed default.
DEFAULT_NUM_SHARDS = 256
DEFAULT_SEED = 12345


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
    random_seed: int = _flag(DEFAULT_SEED, "Random seed for data generation.")
    dupe_factor: int = _flag(10, "Number of times to duplicate the input data (with different masks).")
    masked_lm_prob: float = _flag(0.15, "Masked LM probability.")
    short_seq_prob: float = _flag(0.1, "Probability of creating sequences which are shorter than the maximum length.")
    fixed_mask_count: bool = _flag(False, "Graphcore's count: a full-length sequence gets exactly "
                                          "max_predictions_per_seq masks.")

    def __post_init__(self):
        for f in fields(self):  # plain bool/int/float, whatever number types the caller had (as the original's flags)
            object.__setattr__(self, f.name, f.type(getattr(self, f.name)))
        self._check()  # valid by construction: whoever holds options holds values that make a dataset

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_object(cls, obj, **overrides) -> "GenerationOptions":
        """Options from the attributes of the same names (an argparse Namespace, a Luigi task), then `overrides`."""
        return cls(**{name: overrides[name] if name in overrides else getattr(obj, name) for name in cls.names()})

    def as_dict(self) -> dict:
        return asdict(self)

    def _check(self) -> None:
        """Refuse, with one PrepError line, values that make no dataset: options are checked as they are made,
        so a program holding them has values it can use, before it writes anything.

        Every value the original accepts within these bounds gives the original's instances, including
        max_predictions_per_seq above max_seq_length (masked_lm_* are padded to it) or 0 (no masks).
        """
        if self.max_seq_length < MIN_SEQ_LENGTH:
            raise PrepError(f"max_seq_length={self.max_seq_length}: must be at least {MIN_SEQ_LENGTH}, room for "
                            f"[CLS] A [SEP] B [SEP] with a token in A and in B (the original fails an assertion)")
        if self.max_seq_length > MAX_SEQ_LENGTH:
            raise PrepError(f"max_seq_length={self.max_seq_length}: must be at most {MAX_SEQ_LENGTH} (every "
                            f"record is at least 3 bytes per position; BERT models use 128 to 512)")
        if not 0 <= self.max_predictions_per_seq <= MAX_PREDICTIONS_PER_SEQ:
            raise PrepError(f"max_predictions_per_seq={self.max_predictions_per_seq}: must be within "
                            f"[0, {MAX_PREDICTIONS_PER_SEQ}]")
        if self.dupe_factor < 1:
            raise PrepError(f"dupe_factor={self.dupe_factor}: must be at least 1 (0 gives no instances)")
        if not 0.0 <= self.masked_lm_prob <= 1.0:
            raise PrepError(f"masked_lm_prob={self.masked_lm_prob}: must be within [0, 1]")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise PrepError(f"short_seq_prob={self.short_seq_prob}: must be within [0, 1]")
