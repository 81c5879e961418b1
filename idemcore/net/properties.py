"""Java properties files, as Kafka's tools read them: a broker's ``server.properties``, a client's
``--command-config`` or ``client.properties`` (TLS and SASL settings of the CLIs and the wire audit)."""

from __future__ import annotations

from pathlib import Path

import javaproperties

from idemcore.errors import ConfigError

#: The largest properties file read (Kafka's own is a few kilobytes).
MAX_PROPERTIES_BYTES = 1 << 20


def read_properties(path: str | Path) -> dict[str, str]:
    """A Java properties file (what ``kafka-server-start.sh`` takes): ``key=value``, ``key: value`` or
    ``key value``, ``#``/``!`` comments, backslash escapes and continuation lines, read as ISO-8859-1 as
    ``java.util.Properties.load`` reads a stream; a key given twice keeps its last value."""
    try:
        with open(path, "rb") as stream:
            text = stream.read(MAX_PROPERTIES_BYTES + 1)  # bounded: --config /dev/zero must not eat the memory
    except OSError as exc:
        raise ConfigError(f"cannot read the properties file {path}: {exc.strerror or exc}") from None
    if len(text) > MAX_PROPERTIES_BYTES:
        raise ConfigError(f"the properties file {path} is larger than {MAX_PROPERTIES_BYTES:,} bytes: not a "
                          "properties file Kafka's tools would take")
    try:
        return dict(javaproperties.loads(text.decode("iso-8859-1")))
    except javaproperties.InvalidUEscapeError as exc:
        raise ConfigError(f"{path}: {exc}") from None
