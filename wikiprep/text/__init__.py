"""Text corpora as a source: a folder of plain-text, sentence, line or JSON-lines files (`source.TextSource`),
read by `readers`, its files checked and named once by `files`."""
