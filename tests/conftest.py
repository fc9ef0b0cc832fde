import os
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture
def shared_dir() -> Path:
    if not (SHARED / "fixtures").is_dir():
        pytest.skip(f"reference fixtures not available: {SHARED} is absent (CI places shared/ beside the clone)")
    return SHARED
