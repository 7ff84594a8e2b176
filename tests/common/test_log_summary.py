from odradek.common.log_summary import a_few


def test_a_few_names_the_first_and_counts_the_rest():
    assert a_few([]) == ""
    assert a_few(["a", "b", "c"]) == "a, b, c"
    assert a_few(["a", "b", "c", "d", "e"]) == "a, b, c and 2 more"
    assert a_few([("t", 0), ("t", 1)], lambda k: f"{k[0]}-{k[1]}", shown=1) == "t-0 and 1 more"


def test_only_the_shown_items_are_named():
    named = []
    a_few(range(10_000), lambda i: named.append(i) or str(i))
    assert named == [0, 1, 2]
