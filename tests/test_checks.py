"""The typed input checks every constructor and in-process API shares (idemcore/checks.py): the values they take,
the error each raises and that the error names the value."""

import pytest

from idemcore.checks import (
    bool_arg,
    bool_setting,
    index_arg,
    int_arg,
    int_at_least,
    int_setting,
    str_arg,
    str_or_none_arg,
    str_or_none_setting,
)
from idemcore.errors import ConfigError


@pytest.mark.parametrize(("low", "high", "value", "message"), [
    (0, None, -1, "x must be a non-negative integer, got -1"),
    (1, None, 0, "x must be a positive integer, got 0"),
    (64, None, 63, "x must be an integer of at least 64, got 63"),
    (1, 10_000, 10_001, "x must be an integer from 1 to 10,000, got 10001"),
    (0, 65535, -1, "x must be an integer from 0 to 65,535, got -1"),
    (1, None, True, "x must be a positive integer, got True"),  # a bool is no int
    (1, None, 1.0, "x must be a positive integer, got 1.0"),
    (1, None, "5", "x must be a positive integer, got '5'"),
])
def test_int_setting_refuses_with_one_value_error_naming_the_range(low, high, value, message):
    with pytest.raises(ValueError) as raised:
        int_setting("x", value, low, high)
    assert str(raised.value) == message


def test_int_setting_returns_the_value_at_both_bounds():
    assert int_setting("x", 1, 1, 3) == 1
    assert int_setting("x", 3, 1, 3) == 3
    assert int_setting("x", 2**63 - 1, 0) == 2**63 - 1


def test_int_at_least_splits_the_type_from_the_range():
    with pytest.raises(TypeError, match=r"^n must be an integer, got False$"):
        int_at_least("n", False, 0)
    with pytest.raises(ValueError, match=r"^n must be at least 1, got 0$"):
        int_at_least("n", 0, 1)
    with pytest.raises(ValueError, match=r"^n must be at most 9, got 10$"):
        int_at_least("n", 10, 0, 9)
    assert int_at_least("n", 9, 0, 9) == 9


def test_int_at_least_raises_the_error_types_it_is_given():
    with pytest.raises(ConfigError, match="must be an integer"):
        int_at_least("n", "1", 0, type_error=ConfigError, range_error=ConfigError)
    with pytest.raises(ConfigError, match="must be at least 0"):
        int_at_least("n", -1, 0, type_error=ConfigError, range_error=ConfigError)


@pytest.mark.parametrize("value", [0, 1, "false", None])
def test_bool_setting_takes_only_true_and_false(value):
    with pytest.raises(TypeError, match=rf"^flag must be True or False, got {value!r}$"):
        bool_setting("flag", value)
    assert bool_setting("flag", False) is False


def test_str_or_none_setting_tells_an_empty_string_from_another_type():
    assert str_or_none_setting("id", None) is None
    assert str_or_none_setting("id", "g") == "g"
    with pytest.raises(ValueError, match=r"^id must be a non-empty string or None, got ''$"):
        str_or_none_setting("id", "")
    with pytest.raises(TypeError, match=r"^id must be a non-empty string or None, got 5$"):
        str_or_none_setting("id", 5)


def test_arguments_are_type_errors_naming_the_type_and_a_shortened_value():
    with pytest.raises(TypeError, match=r"^producer_id must be an int, got True$"):
        int_arg("producer_id", True)
    with pytest.raises(TypeError, match=r"^committed must be a bool, got 1$"):
        bool_arg("committed", 1)
    with pytest.raises(TypeError) as raised:
        str_arg("member_id", b"m" * 200)
    assert str(raised.value) == f"member_id must be a str, got {b'm' * 200!r:.80}"
    with pytest.raises(TypeError, match=r"^rack_id must be a str or None, got 3$"):
        str_or_none_arg("rack_id", 3)
    assert str_or_none_arg("rack_id", None) is None
    assert (int_arg("a", -5), bool_arg("b", True), str_arg("c", "")) == (-5, True, "")


def test_index_arg_names_the_range_of_indexes():
    assert index_arg("partition", 3, 4) == 3
    for bad in (4, -1, True):
        with pytest.raises(ValueError, match=rf"^partition must be an int in 0\.\.3, got {bad!r}$"):
            index_arg("partition", bad, 4)
