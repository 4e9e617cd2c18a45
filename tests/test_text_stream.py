"""Stop strings cut from streamed text (engines/prompt/text_stream.py), checked against their plain
definition: the text up to where the stop string the model completed first begins, with the
start of a possible stop string held back until it is clear, and which stop string it was."""

import random

import pytest

from engines.prompt.text_stream import StopStringFilter, find_stop, partial_suffix_length


def held_back(text: str, markers: list[str]) -> int:
    """The plain definition: the longest end of ``text`` that a marker starts with but is not."""
    return max((n for n in range(1, len(text) + 1) for m in markers if n < len(m) and m.startswith(text[-n:])), default=0)


def shown_so_far(text: str, markers: list[str]) -> str:
    found = find_stop(text, markers)
    return text[:found[0]] if found is not None else text[: len(text) - held_back(text, markers)]


@pytest.mark.parametrize("seed", range(4))
def test_the_filter_gives_out_what_the_definition_says_piece_by_piece(seed):
    rng = random.Random(seed)
    for _ in range(3000):
        alphabet = rng.choice(("ab", "abc"))
        markers = ["".join(rng.choices(alphabet, k=rng.randint(1, 6))) for _ in range(rng.randint(1, 4))]
        text = "".join(rng.choices(alphabet, k=rng.randint(0, 30)))
        cuts = sorted(rng.sample(range(len(text) + 1), min(len(text) + 1, rng.randint(0, 6))))
        stop_filter, given, read = StopStringFilter(markers), "", ""
        for start, end in zip([0, *cuts], [*cuts, len(text)]):
            read += text[start:end]
            given += stop_filter.push(text[start:end])
            assert given == shown_so_far(read, markers), (markers, read)
            if stop_filter.stopped:
                break
        # The same stop string as the plain definition's, where one ended the text.
        assert stop_filter.matched == (found[1] if (found := find_stop(text, markers)) else None)
        given += stop_filter.flush()
        assert given == shown_so_far(text, markers) if stop_filter.stopped else given == text
        assert partial_suffix_length(text, markers) == held_back(text, markers)


def test_the_stop_string_completed_first_wins():
    # "bc" is complete when "c" arrives; "abcd" would be complete only a character later.
    assert find_stop("xabcd", ["abcd", "bc"]) == (2, "bc")
    stop_filter = StopStringFilter(["abcd", "bc"])
    assert stop_filter.push("xab") == "x" and stop_filter.push("cd") == "a" and stop_filter.matched == "bc"


def test_a_long_near_miss_is_held_back_then_given_out():
    marker = "a" * 255 + "b"
    stop_filter = StopStringFilter([marker])
    given = "".join(stop_filter.push("a") for _ in range(10_000))
    assert len(given) == 10_000 - 255 and not stop_filter.stopped
    assert stop_filter.push("c") == "a" * 255 + "c"
