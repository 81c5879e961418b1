"""Parquet files as idemcore writes and reads them: every page carries a CRC, and every page that has one is
verified on read; the footer, which has no CRC, is cross-checked.

A flipped byte inside a compressed page can decode to plausible values (an audit of such a file counted 147
sequence gaps instead of 3, exit 0); with the page's CRC it is an error naming the file. Files written without
page checksums (pyarrow's default; Spark's writer adds them) are read as they are: there is nothing to verify.
Measured on a 10M-batch dataset as ``generate`` writes it (64 LZ4 files, one thread): reading it took 296-308 ms
without verification and 316-324 ms with it.

What no CRC covers, checked here: a footer's row counts (a flipped bit in a row group's count makes every reader
stop early, so rows go missing without an error) and a dictionary page's header (a wrong value count decodes to
indices past the dictionary).
"""

from __future__ import annotations

import base64
import binascii
import os
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from idemcore.errors import one_line

#: What pyarrow raises for a file it cannot read: OSError (I/O, a failed CRC), ValueError (ArrowInvalid: a
#: malformed footer or page) and any other ArrowException (ArrowNotImplementedError: a type it does not know).
READ_ERRORS = (OSError, ValueError, pa.ArrowException)


def write_parquet(table: pa.Table, where: str | os.PathLike[str], **options: Any) -> None:
    """``pq.write_table`` with a CRC in every page header (``options``: pyarrow's writer options)."""
    pq.write_table(table, where, write_page_checksum=True, **options)


def open_parquet(path: str | os.PathLike[str], read_dictionary: list[str] | None = None) -> pq.ParquetFile:
    """A Parquet file by local path or URI (``read_dictionary``: string columns read as dictionaries), whose
    pages are checked against their CRCs as they are read (OSError on a mismatch) and whose footer's row
    counts agree (ValueError if not)."""
    path = os.fspath(path)
    source: Any = path
    if is_uri(path):
        from pyarrow import fs

        filesystem, inner = fs.FileSystem.from_uri(path)
        source = filesystem.open_input_file(inner)
    try:
        parquet = pq.ParquetFile(source, read_dictionary=read_dictionary, page_checksum_verification=True)
    except KeyError as exc:  # (pyarrow's way of saying a column of read_dictionary is not in the file)
        raise ValueError(f"no column {exc.args[0].decode(errors='replace')!r} to read as a dictionary") from None
    check_footer(parquet.metadata)
    return parquet


def is_uri(path: str) -> bool:
    """Whether ``path`` is a URI for a pyarrow filesystem (``file://``, ``hdfs://``, ``s3://``...), not a local
    path."""
    return "://" in path


def file_size(path: str | os.PathLike[str]) -> int:
    """The size in bytes of a local file or of one at a URI."""
    path = os.fspath(path)
    if is_uri(path):
        from pyarrow import fs

        filesystem, inner = fs.FileSystem.from_uri(path)
        return int(filesystem.get_file_info(inner).size)
    return os.path.getsize(path)


def read_parquet(path: str | os.PathLike[str]) -> pa.Table:
    """The whole file, checked as :func:`open_parquet` and :func:`checked` check it; an error names the file
    (:func:`unreadable`)."""
    try:
        return checked(open_parquet(path).read())
    except READ_ERRORS as exc:
        raise unreadable(path, exc) from None


def check_footer(metadata: pq.FileMetaData) -> None:
    """ValueError unless the footer agrees with itself: the column names with the Arrow schema pyarrow stores
    beside them (the null type in both or neither), the file's rows with its row groups' rows.
    (Not the column chunks' counts: pyarrow 26 aborts the process, uncatchably, on some corrupt chunk metadata
    when Python looks at it; its reads raise.)"""
    groups = [metadata.row_group(index) for index in range(metadata.num_row_groups)]
    if sum(group.num_rows for group in groups) != metadata.num_rows:
        raise ValueError(f"corrupt footer: its row groups hold {sum(g.num_rows for g in groups)} rows, "
                         f"the file {metadata.num_rows}")
    stored = (metadata.metadata or {}).get(b"ARROW:schema")  # (pyarrow's writer: the names twice)
    if stored is not None:
        own = metadata.schema.to_arrow_schema()
        names = own.names
        try:
            arrow = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(stored)))
        except (ValueError, binascii.Error) as exc:
            raise ValueError(f"corrupt footer: its Arrow schema does not decode ({exc})") from None
        arrow_names = arrow.names
        lost = [field.name for field, kept in zip(arrow, own, strict=False)
                if pa.types.is_null(field.type) != pa.types.is_null(kept.type)]
        if lost:  # (pyarrow would read every value of such a column as null)
            raise ValueError(f"corrupt footer: column {lost[0]!r} has the null type in one of its two schemas")
        if arrow_names != names:
            odd = [name for name in names if name not in arrow_names] or names
            raise ValueError(f"corrupt footer: its columns {odd} are not those of the Arrow schema stored beside "
                             f"them {arrow_names}")


def checked(table: pa.Table) -> pa.Table:
    """``table`` after a full check of its dictionary columns (ValueError naming the column: a dictionary
    page whose header no CRC covers can decode to indices past the dictionary)."""
    for name, column in zip(table.column_names, table.columns, strict=True):
        if pa.types.is_dictionary(column.type):
            try:
                column.validate(full=True)
            except pa.ArrowInvalid as exc:
                raise ValueError(f"column {name!r} does not decode: {exc}") from None
    return table


def unreadable(path: str | os.PathLike[str], exc: BaseException, said: str = "cannot read {path}"
               ) -> OSError | ValueError:
    """The error to raise for a file pyarrow could not read (its messages do not name the file, and may span
    lines): ``said`` (``{path}`` filled in), then why, on one line; an OSError for an I/O error or a failed CRC,
    else ValueError."""
    kind = OSError if isinstance(exc, OSError) else ValueError
    return kind(f"{said.format(path=os.fspath(path))}: {one_line(exc)}")


def footer_written(path: str | os.PathLike[str]) -> bool:
    """Whether a local file ends as a whole Parquet file does (its footer's length, then the magic ``PAR1``,
    the footer fitting in the file): a writer writes these last, so a file that does and still cannot be read
    is corrupt, not unfinished."""
    try:
        with open(path, "rb") as file:
            size = file.seek(0, os.SEEK_END)
            if size < 12:
                return False
            file.seek(size - 8)
            tail = file.read(8)
    except OSError:
        return False
    return tail[4:] == b"PAR1" and 12 + int.from_bytes(tail[:4], "little") <= size
