"""Wikipedia, the first corpus: a dated dump downloaded (`dump`), extracted with WikiExtractor (`extract`),
cleaned (`clean`), and read as documents by `source.WikipediaSource`; `samples` writes a small dump laid out
like the dumps site, for the demo and the tests.

Nothing outside this package imports it but the Wikipedia workflow (`workflows/wiki.py`), the tests
and the benchmarks: the BERT stages take documents from any `wikiprep.corpus.Source`.
"""
