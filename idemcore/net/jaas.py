"""Kafka's ``sasl.jaas.config`` syntax (``org.apache.kafka.common.security.JaasConfig``): one login module, its
control flag and its options, ended by a semicolon::

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";

A value is a word (letters, digits, ``-_$.``) or a quoted string (``"..."`` or ``'...'``, backslash escapes as
Java's StreamTokenizer reads them); ``//`` and ``/* */`` comments are skipped. For PLAIN the server's users are
the ``user_<name>`` options (Kafka's ``PlainServerCallbackHandler``); ``username``/``password`` are what the
broker itself sends as a client (inter-broker). A text that does not parse is refused in one line naming the
character where it goes wrong."""

from __future__ import annotations

import re
from dataclasses import dataclass

from idemcore.errors import ConfigError

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
#: The login module each mechanism takes.
LOGIN_MODULES = {"PLAIN": PLAIN_LOGIN_MODULE, "SCRAM-SHA-256": SCRAM_LOGIN_MODULE, "SCRAM-SHA-512": SCRAM_LOGIN_MODULE}
FLAGS = ("required", "requisite", "sufficient", "optional")
_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_$.")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "a": "\a", "v": "\v"}


class JaasConfigError(ConfigError):
    """A ``sasl.jaas.config`` value Kafka would refuse."""


@dataclass(frozen=True, slots=True)
class JaasConfig:
    login_module: str
    flag: str
    options: dict[str, str]

    def plain_users(self) -> dict[str, str]:
        """The PLAIN server's users: ``user_alice="secret"`` gives alice -> secret."""
        return {key[len("user_"):]: value for key, value in self.options.items()
                if key.startswith("user_") and len(key) > len("user_")}

    def client_credentials(self) -> tuple[str, str]:
        """``(username, password)`` this side sends as a client; JaasConfigError when either is missing."""
        missing = [key for key in ("username", "password") if key not in self.options]
        if missing:
            raise JaasConfigError(f"JAAS config of {self.login_module} has no {' and no '.join(missing)} option")
        return self.options["username"], self.options["password"]

    def __repr__(self) -> str:  # options hold passwords: never in a log or a traceback
        return f"JaasConfig({self.login_module!r}, {self.flag!r}, options={sorted(self.options)})"


class _Tokens:
    """Java's StreamTokenizer as JaasConfig sets it up: words, quoted strings, single-character tokens."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0

    def fail(self, what: str, at: int | None = None) -> JaasConfigError:
        at = self.at if at is None else at
        # What follows is shown up to the next value only: the text holds passwords, and errors reach logs.
        shown = re.split(r'[="]', self.text[at:at + 20], maxsplit=1)[0]
        return JaasConfigError(f"JAAS config: {what} at character {at + 1}"
                               + (" (the end)" if at >= len(self.text) else f" ({shown!r})" if shown.strip() else ""))

    def _skip(self) -> None:
        text = self.text
        while self.at < len(text):
            if text[self.at].isspace():
                self.at += 1
            elif text.startswith("//", self.at):
                end = text.find("\n", self.at)
                self.at = len(text) if end < 0 else end + 1
            elif text.startswith("/*", self.at):
                end = text.find("*/", self.at + 2)
                if end < 0:
                    raise self.fail("a comment is not closed")
                self.at = end + 2
            else:
                return

    def next(self) -> tuple[str, str, int]:
        """``(kind, text, position)``: kind is ``word``, ``quoted``, ``char`` or ``end``."""
        self._skip()
        text, start = self.text, self.at
        if start >= len(text):
            return "end", "", start
        char = text[start]
        if char in _WORD:
            end = start
            while end < len(text) and text[end] in _WORD:
                end += 1
            self.at = end
            return "word", text[start:end], start
        if char in "\"'":
            return "quoted", self._quoted(char), start
        self.at += 1
        return "char", char, start

    def _quoted(self, quote: str) -> str:
        text, start = self.text, self.at
        out: list[str] = []
        at = start + 1
        while at < len(text) and text[at] != quote:
            char = text[at]
            if char == "\\" and at + 1 < len(text):
                escaped = text[at + 1]
                out.append(_ESCAPES.get(escaped, escaped))
                at += 2
            else:
                out.append(char)
                at += 1
        if at >= len(text):
            raise self.fail("a quoted value is not closed", start)
        self.at = at + 1
        return "".join(out)


def parse_jaas_config(text: str) -> JaasConfig:
    """The one login module of a ``sasl.jaas.config`` value; JaasConfigError in one line naming the position."""
    tokens = _Tokens(text)
    modules: list[JaasConfig] = []
    while True:
        kind, module, at = tokens.next()
        if kind == "end":
            break
        if kind != "word":
            raise tokens.fail("expected a login module class name", at)
        kind, flag, at = tokens.next()
        if kind != "word" or flag.lower() not in FLAGS:
            raise tokens.fail(f"expected a control flag ({', '.join(FLAGS)}) after {module}", at)
        options: dict[str, str] = {}
        while True:
            kind, key, at = tokens.next()
            if kind == "char" and key == ";":
                break
            if kind != "word":
                raise tokens.fail("expected an option name or ';'", at)
            kind, eq, at = tokens.next()
            if (kind, eq) != ("char", "="):
                raise tokens.fail(f"expected '=' after option {key}", at)
            kind, value, at = tokens.next()
            if kind not in ("word", "quoted"):
                raise tokens.fail(f"expected a value for option {key}", at)
            options[key] = value
        modules.append(JaasConfig(module, flag.lower(), options))
    if len(modules) != 1:
        raise JaasConfigError(f"JAAS config property contains {len(modules)} login modules, should be 1 module")
    return modules[0]


def jaas_for_mechanism(text: str, mechanism: str) -> JaasConfig:
    """``text`` parsed, its login module checked to be the one ``mechanism`` takes."""
    config = parse_jaas_config(text)
    wanted = LOGIN_MODULES.get(mechanism)
    if wanted is None:
        raise JaasConfigError(f"no JAAS login module for SASL mechanism {mechanism!r} "
                              f"(known: {', '.join(LOGIN_MODULES)})")
    if config.login_module != wanted:
        raise JaasConfigError(f"JAAS config for {mechanism} names {config.login_module}, not {wanted}")
    return config
