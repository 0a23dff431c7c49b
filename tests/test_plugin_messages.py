"""What a hidden test's failure may say: only what the author wrote on purpose."""

import types

from runners.grading.pytest_plugin import _authored_message, _describe


def test_pytest_rendering_is_dropped() -> None:
    rendered = "assert False\n +  where False = close(28136.251, 7519)"
    assert _authored_message(AssertionError(rendered)) == ""


def test_author_message_is_kept_without_values() -> None:
    rendered = "the sum is off\nassert 1.0 == 2.0\n +  where 1.0 = f(3)"
    assert _authored_message(AssertionError(rendered)) == "the sum is off"


def test_bare_assert() -> None:
    assert _authored_message(AssertionError()) == ""


def test_a_docstrings_first_sentence_is_kept_whole() -> None:
    def test_sizes() -> None:
        """Sums over the sizes (10, 100,
        468, 830), in parallel.

        Details for the author only."""

    item = types.SimpleNamespace(function=test_sizes, name="test_sizes")
    assert _describe(item) == "Sums over the sizes (10, 100, 468, 830), in parallel."  # type: ignore[arg-type]
    assert _describe(types.SimpleNamespace(function=None, name="test_x")) == "test_x"  # type: ignore[arg-type]
