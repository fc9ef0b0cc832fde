"""NVIDIA's HDF5 reader for BERT pre-training, vendored so the tests read our files as NVIDIA's trainer does.

From NVIDIA DeepLearningExamples, PyTorch/LanguageModeling/BERT/run_pretraining.py, class
`pretraining_dataset` (`__init__`, `__len__`, `__getitem__`) and its file-discovery rule, at commit
56ccaf80 (2022-03-01), the last before LDDL replaced this reader (MLPerf's PyTorch BERT reads the
same layout the same way); and the HDF5 lines of create_pretraining_data.py's
`write_instance_to_example_file` (at 729963dd, 2024-04), the reference for dtypes and compression.
Copyright (c) 2019 NVIDIA CORPORATION; Copyright 2018 The Google AI Language Team Authors and The
HugginFace Inc. team. Licensed under the Apache License, Version 2.0
(http://www.apache.org/licenses/LICENSE-2.0); distributed on an "AS IS" BASIS, WITHOUT WARRANTIES
OR CONDITIONS OF ANY KIND.

Changes: the methods' code is NVIDIA's, unchanged in logic; the class no longer derives from
torch's `Dataset` (an empty base), and `torch` is `_TorchStandIn` below, numpy behind the five
torch calls the reader makes with torch's semantics (torch is not a dependency of this project).
"""

import os

import h5py
import numpy as np


class _Tensor:
    """The part of torch.Tensor `__getitem__` uses: ==, *, len, indexing and index assignment, nonzero, item."""

    def __init__(self, array):
        self.array = np.asarray(array)

    @property
    def shape(self):
        return self.array.shape

    def __len__(self):
        return len(self.array)

    def __eq__(self, other):
        return _Tensor(self.array == other)

    def __mul__(self, other):
        return _Tensor(self.array * other)

    def nonzero(self):
        """torch's nonzero: a [count, ndim] tensor of indices (numpy's gives a tuple of arrays)."""
        return _Tensor(np.argwhere(self.array))

    def item(self):
        return self.array.item()

    @staticmethod
    def _key(key):
        return key.array if isinstance(key, _Tensor) else key

    def __getitem__(self, key):
        return _Tensor(self.array[self._key(key)])

    def __setitem__(self, key, value):
        self.array[self._key(key)] = value.array if isinstance(value, _Tensor) else value


class _TorchStandIn:
    long = np.int64

    @staticmethod
    def from_numpy(array):
        return _Tensor(array)

    @staticmethod
    def ones(shape, dtype):
        return _Tensor(np.ones(shape, dtype=dtype))


torch = _TorchStandIn


def training_files(input_dir):
    """The files NVIDIA's run_pretraining.py trains on: those of `--input_dir` whose name contains 'training'."""
    files = [os.path.join(input_dir, f) for f in os.listdir(input_dir) if
             os.path.isfile(os.path.join(input_dir, f)) and 'training' in f]
    files.sort()
    return files


class pretraining_dataset:

    def __init__(self, input_file, max_pred_length):
        self.input_file = input_file
        self.max_pred_length = max_pred_length
        f = h5py.File(input_file, "r")
        keys = ['input_ids', 'input_mask', 'segment_ids', 'masked_lm_positions', 'masked_lm_ids',
                'next_sentence_labels']
        self.inputs = [np.asarray(f[key][:]) for key in keys]
        f.close()

    def __len__(self):
        'Denotes the total number of samples'
        return len(self.inputs[0])

    def __getitem__(self, index):

        [input_ids, input_mask, segment_ids, masked_lm_positions, masked_lm_ids, next_sentence_labels] = [
            torch.from_numpy(input[index].astype(np.int64)) if indice < 5 else torch.from_numpy(
                np.asarray(input[index].astype(np.int64))) for indice, input in enumerate(self.inputs)]

        masked_lm_labels = torch.ones(input_ids.shape, dtype=torch.long) * -1
        index = self.max_pred_length
        # store number of  masked tokens in index
        padded_mask_indices = (masked_lm_positions == 0).nonzero()
        if len(padded_mask_indices) != 0:
            index = padded_mask_indices[0].item()
        masked_lm_labels[masked_lm_positions[:index]] = masked_lm_ids[:index]

        return [input_ids, segment_ids, input_mask,
                masked_lm_labels, next_sentence_labels]


def write_like_nvidia(output_file, features):
    """NVIDIA's create_pretraining_data.py `write_instance_to_example_file`, its last lines: each feature array
    written at once, with its dtype and gzip (`features` as it builds them: int32 arrays, [N] for the labels)."""
    f = h5py.File(output_file, 'w')
    f.create_dataset("input_ids", data=features["input_ids"], dtype='i4', compression='gzip')
    f.create_dataset("input_mask", data=features["input_mask"], dtype='i1', compression='gzip')
    f.create_dataset("segment_ids", data=features["segment_ids"], dtype='i1', compression='gzip')
    f.create_dataset("masked_lm_positions", data=features["masked_lm_positions"], dtype='i4', compression='gzip')
    f.create_dataset("masked_lm_ids", data=features["masked_lm_ids"], dtype='i4', compression='gzip')
    f.create_dataset("next_sentence_labels", data=features["next_sentence_labels"], dtype='i1', compression='gzip')
    f.flush()
    f.close()
