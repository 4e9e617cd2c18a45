"""The one shape of a chat's messages (store/message_tree.py): what each of its readers relies on."""

import pytest

from store import MessageTree


def test_a_line_is_one_branch_and_versions_are_the_messages_following_the_same_one():
    assert MessageTree.line(["q", "a"]) == MessageTree(["q", "a"], [None, 0], shown=1)
    assert MessageTree.line([]).branch() == []
    tree = MessageTree(["q", "a1", "a2", "q2", "a3", "more"], [None, 0, 0, None, 3, 1], shown=4)
    assert tree.branch() == [3, 4]
    assert tree.branch(through=0) == [0, 1, 5], "on to the message written last after it"
    assert tree.versions(1) == [1, 2] and tree.versions(3) == [0, 3] and tree.versions(5) == [5]
    assert sorted(tree.below([1])) == [1, 5] and sorted(tree.below([0])) == [0, 1, 2, 5]
    assert tree.map(str.upper).messages == ["Q", "A1", "A2", "Q2", "A3", "MORE"] and tree.map(str.upper).branch() == [3, 4]


@pytest.mark.parametrize("parents, shown, fault", [
    ([None, 1], None, "message 1 follows 1"),
    ([1, None], None, "message 0 follows 1"),
    ([None, 0], 2, "the message shown, 2, is not in the tree"),
    ([None], None, "2 messages but 1 parents"),
])
def test_a_tree_that_is_not_one_is_refused(parents, shown, fault):
    with pytest.raises(ValueError, match=fault):
        MessageTree(["q", "a"], parents, shown)


def test_rows_named_by_id_become_places_and_a_gone_parent_makes_a_first_message():
    rows = [(10, None), (11, 10), (12, 10), (14, 13), (15, 20)]
    tree = MessageTree.of_rows(rows, lambda row: row[0], lambda row: row[1], shown=12)
    assert tree.parents == [None, 0, 0, None, None] and tree.branch() == [0, 2]
    assert MessageTree.of_rows(rows, lambda row: row[0], lambda row: row[1], shown=99).branch() == [4], \
        "a shown message that is gone: the branch written last"
    assert MessageTree.of_rows([(1, 2), (2, None)], lambda row: row[0], lambda row: row[1]).parents == [None, None], \
        "a parent written after its message is taken as gone"


def test_a_page_adds_versions_shows_another_and_takes_messages_out():
    tree = MessageTree.line(["q", "a1"])
    assert tree.add("a2", 0) == 2 and tree.branch() == [0, 2] and tree.versions(2) == [1, 2], "added beside a1, and shown"
    assert tree.add("more", 2) == 3 and tree.branch() == [0, 2, 3]
    tree.show(1)
    assert tree.branch() == [0, 1]
    tree.show(0)
    assert tree.branch() == [0, 2, 3], "through q and on to the message written last after it"
    with pytest.raises(ValueError, match="cannot follow 9"):
        tree.add("x", 9)
    assert tree.remove([2]) == [0, 1], "a2 and what follows it go; the places kept, as they were"
    assert tree.messages == ["q", "a1"] and tree.parents == [None, 0] and tree.branch() == [0], "shown: the nearest message before"
    assert tree.add("a3", 0) == 2 and tree.versions(1) == [1, 2], "the tree's index of versions is rebuilt"
    assert tree.remove([0]) == [] and tree.shown is None and tree.branch() == []
