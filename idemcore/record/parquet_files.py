"""Parquet files as idemcore writes and reads them: every page carries a CRC, and every page that has one is
verified on read.

A flipped byte inside a compressed page can decode to plausible values (an audit of such a file counted 147
sequence gaps instead of 3, exit 0); with the page's CRC it is an error naming the file. Files written without
page checksums (pyarrow's default; Spark's writer adds them) are read as they are: there is nothing to verify.
Measured on the 10M-batch dataset of bench_spark (64 LZ4 files, one thread): reading it took 296-308 ms
without verification and 316-324 ms with it.
"""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


def write_parquet(table: pa.Table, where: str | os.PathLike[str], **options: Any) -> None:
    """``pq.write_table`` with a CRC in every page header (``options``: pyarrow's writer options)."""
    pq.write_table(table, where, write_page_checksum=True, **options)


def open_parquet(path: str | os.PathLike[str], read_dictionary: list[str] | None = None) -> pq.ParquetFile:
    """A Parquet file by local path or URI (``read_dictionary``: string columns read as dictionaries), whose
    pages are checked against their CRCs as they are read (OSError on a mismatch)."""
    path = os.fspath(path)
    if "://" in path:
        from pyarrow import fs

        filesystem, inner = fs.FileSystem.from_uri(path)
        return pq.ParquetFile(filesystem.open_input_file(inner), read_dictionary=read_dictionary,
                              page_checksum_verification=True)
    return pq.ParquetFile(path, read_dictionary=read_dictionary, page_checksum_verification=True)
