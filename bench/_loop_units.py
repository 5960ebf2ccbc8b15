"""The retry-heavy project of bench/loop.py: twelve python units whose first attempt fails in
ways that happen (an edge case, float money, a missing key, an off-by-one page, a lazy
iterator returned for a list), each with its tester's three tests (named after the three
acceptance criteria), the right code, and what the coder gets wrong:

- plain (5 units): attempt 1 is red; the retry fixes it.
- regression (4 units): the retry's first fix breaks a test that passed before.
- stuck (3 units): the retry keeps tweaking code around the bug, checking it with a
  command whose error differs only in an object's address each time.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Unit:
    """One unit: its module, criteria, tests, and the code of each kind of attempt."""

    id: str
    kind: str  # plain | regression | stuck
    signature: str  # the contract's export, e.g. "slugify(title)": "-> str"
    returns: str
    criteria: tuple[str, str, str]
    tests: str
    good: str
    bug: str
    failing: str  # the test attempt 1 fails (for the reflection)
    cause: str  # why, as the coder reflects on it
    fix: str  # what the retry changes
    regress: str | None = None  # regression units: the retry's first fix
    regressed: str = ""  # regression units: the test that fix breaks
    variants: tuple[str, ...] = field(default_factory=tuple)  # stuck units: the tweaks
    smoke: str = ""  # stuck units: the coder's own check, whose error carries an address

    @property
    def module(self) -> str:
        return self.id.replace("-", "_")


def _code(body: str) -> str:
    return f'"""A unit of the loop benchmark."""\n\n\n{body.strip()}\n'


UNITS = [
    Unit(
        "slugify", "plain", "slugify(title)", "-> str",
        ("slugify lowercases the title and joins its words with dashes",
         "slugify drops punctuation between words",
         "slugify strips dashes at both ends"),
        """from slugify import slugify


def test_slugify_lowercases_the_title_and_joins_its_words_with_dashes():
    assert slugify("Hello World") == "hello-world"


def test_slugify_drops_punctuation_between_words():
    assert slugify("a, b; c") == "a-b-c"


def test_slugify_strips_dashes_at_both_ends():
    assert slugify("  -Hi there!- ") == "hi-there"
""",
        _code("""import re


def slugify(title: str) -> str:
    \"\"\"Lower-case words joined by dashes.\"\"\"
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")"""),
        _code("""import re


def slugify(title: str) -> str:
    \"\"\"Lower-case words joined by dashes.\"\"\"
    return re.sub(r"[^a-z0-9]+", "-", title.lower())"""),
        "test_slugify_strips_dashes_at_both_ends",
        "slugify kept the dashes that replaced leading and trailing punctuation",
        "slugify in code/slugify.py strips dashes at both ends",
    ),
    Unit(
        "clamp", "plain", "clamp(x, lo, hi)", "-> int",
        ("clamp returns x when it lies between lo and hi",
         "clamp returns lo when x is below lo",
         "clamp returns hi when x is above hi"),
        """from clamp import clamp


def test_clamp_returns_x_when_it_lies_between_lo_and_hi():
    assert clamp(5, 0, 10) == 5


def test_clamp_returns_lo_when_x_is_below_lo():
    assert clamp(-3, 0, 10) == 0


def test_clamp_returns_hi_when_x_is_above_hi():
    assert clamp(12, 0, 10) == 10
""",
        _code("""def clamp(x: int, lo: int, hi: int) -> int:
    \"\"\"x, kept within [lo, hi].\"\"\"
    return max(lo, min(x, hi))"""),
        _code("""def clamp(x: int, lo: int, hi: int) -> int:
    \"\"\"x, kept within [lo, hi].\"\"\"
    return min(lo, max(x, hi))"""),
        "test_clamp_returns_x_when_it_lies_between_lo_and_hi",
        "clamp swapped min and max, so it returned lo for every x",
        "clamp in code/clamp.py returns max(lo, min(x, hi))",
    ),
    Unit(
        "money", "plain", "to_cents(text)", "-> int",
        ("to_cents parses whole amounts like 12 into cents",
         "to_cents parses amounts with two decimals like 0.29 exactly",
         "to_cents rejects text that is not an amount with ValueError"),
        """import pytest

from money import to_cents


def test_to_cents_parses_whole_amounts_into_cents():
    assert to_cents("12") == 1200


def test_to_cents_parses_amounts_with_two_decimals_exactly():
    assert to_cents("0.29") == 29


def test_to_cents_rejects_text_that_is_not_an_amount_with_value_error():
    with pytest.raises(ValueError):
        to_cents("abc")
""",
        _code("""from decimal import Decimal, InvalidOperation


def to_cents(text: str) -> int:
    \"\"\"An amount like 12.34 as integer cents.\"\"\"
    try:
        return int(Decimal(text) * 100)
    except InvalidOperation as exc:
        raise ValueError(text) from exc"""),
        _code("""def to_cents(text: str) -> int:
    \"\"\"An amount like 12.34 as integer cents.\"\"\"
    return int(float(text) * 100)"""),
        "test_to_cents_parses_amounts_with_two_decimals_exactly",
        "to_cents multiplied a float, and 0.29 * 100 is 28.999..., truncated to 28",
        "to_cents in code/money.py parses with Decimal",
    ),
    Unit(
        "titles", "plain", "title_of(record)", "-> str",
        ("title_of returns the stripped title of a record",
         "title_of returns untitled for a record without a title",
         "title_of returns untitled for a blank title"),
        """from titles import title_of


def test_title_of_returns_the_stripped_title_of_a_record():
    assert title_of({"title": "  Milk "}) == "Milk"


def test_title_of_returns_untitled_for_a_record_without_a_title():
    assert title_of({}) == "untitled"


def test_title_of_returns_untitled_for_a_blank_title():
    assert title_of({"title": "   "}) == "untitled"
""",
        _code("""def title_of(record: dict) -> str:
    \"\"\"The record's title, stripped, or untitled.\"\"\"
    return (record.get("title") or "").strip() or "untitled\""""),
        _code("""def title_of(record: dict) -> str:
    \"\"\"The record's title, stripped, or untitled.\"\"\"
    return record["title"].strip() or "untitled\""""),
        "test_title_of_returns_untitled_for_a_record_without_a_title",
        "title_of indexed record['title'], which raises KeyError when the key is absent",
        "title_of in code/titles.py reads record.get('title')",
    ),
    Unit(
        "pages", "plain", "page(items, number, size)", "-> list",
        ("page 1 holds the first size items",
         "page 2 holds the next size items",
         "a page past the end is empty"),
        """from pages import page


def test_page_1_holds_the_first_size_items():
    assert page(list(range(10)), 1, 3) == [0, 1, 2]


def test_page_2_holds_the_next_size_items():
    assert page(list(range(10)), 2, 3) == [3, 4, 5]


def test_a_page_past_the_end_is_empty():
    assert page(list(range(10)), 5, 3) == []
""",
        _code("""def page(items: list, number: int, size: int) -> list:
    \"\"\"The 1-based page `number` of `size` items.\"\"\"
    return items[(number - 1) * size : number * size]"""),
        _code("""def page(items: list, number: int, size: int) -> list:
    \"\"\"The 1-based page `number` of `size` items.\"\"\"
    return items[number * size : (number + 1) * size]"""),
        "test_page_1_holds_the_first_size_items",
        "page treated number as 0-based, so page 1 started at the second page",
        "page in code/pages.py slices from (number - 1) * size",
    ),
    Unit(
        "words", "regression", "count_words(text)", "-> dict",
        ("count_words counts words case-insensitively",
         "count_words splits on any whitespace",
         "count_words keeps apostrophes inside words"),
        """from words import count_words


def test_count_words_counts_words_case_insensitively():
    assert count_words("The the") == {"the": 2}


def test_count_words_splits_on_any_whitespace():
    assert count_words("a\\tb\\nc") == {"a": 1, "b": 1, "c": 1}


def test_count_words_keeps_apostrophes_inside_words():
    assert count_words("don't stop") == {"don't": 1, "stop": 1}
""",
        _code("""import re
from collections import Counter


def count_words(text: str) -> dict:
    \"\"\"How often each word occurs, case-insensitively.\"\"\"
    return dict(Counter(re.findall(r"[\\w']+", text.lower())))"""),
        _code("""from collections import Counter


def count_words(text: str) -> dict:
    \"\"\"How often each word occurs, case-insensitively.\"\"\"
    return dict(Counter(text.split()))"""),
        "test_count_words_counts_words_case_insensitively",
        "count_words counted The and the apart: it never lowercased",
        "count_words in code/words.py lowercases before counting",
        regress=_code("""import re
from collections import Counter


def count_words(text: str) -> dict:
    \"\"\"How often each word occurs, case-insensitively.\"\"\"
    return dict(Counter(re.findall(r"\\w+", text.lower())))"""),
        regressed="test_count_words_keeps_apostrophes_inside_words",
    ),
    Unit(
        "discounts", "regression", "price_after(price_cents, code)", "-> int",
        ("price_after takes 10% off with SAVE10, the discount rounded down",
         "price_after keeps the price without a code",
         "price_after raises ValueError for an unknown code"),
        """import pytest

from discounts import price_after


def test_price_after_takes_10_off_with_save10_the_discount_rounded_down():
    assert price_after(999, "SAVE10") == 900


def test_price_after_keeps_the_price_without_a_code():
    assert price_after(999, "") == 999


def test_price_after_raises_value_error_for_an_unknown_code():
    with pytest.raises(ValueError):
        price_after(999, "NOPE")
""",
        _code("""def price_after(price_cents: int, code: str) -> int:
    \"\"\"The price after a discount code.\"\"\"
    if not code:
        return price_cents
    if code != "SAVE10":
        raise ValueError(code)
    return price_cents - price_cents // 10"""),
        _code("""def price_after(price_cents: int, code: str) -> int:
    \"\"\"The price after a discount code.\"\"\"
    if not code:
        return price_cents
    if code != "SAVE10":
        raise ValueError(code)
    return round(price_cents * 0.9)"""),
        "test_price_after_takes_10_off_with_save10_the_discount_rounded_down",
        "price_after rounded the discounted price, so 999 became 899 instead of 900",
        "price_after in code/discounts.py subtracts price_cents // 10",
        regress=_code("""def price_after(price_cents: int, code: str) -> int:
    \"\"\"The price after a discount code.\"\"\"
    if code == "SAVE10":
        return price_cents - price_cents // 10
    return price_cents"""),
        regressed="test_price_after_raises_value_error_for_an_unknown_code",
    ),
    Unit(
        "weekdays", "regression", "next_weekday(day)", "-> int",
        ("next_weekday of Monday to Thursday is the next day",
         "next_weekday of Friday is Monday",
         "next_weekday of Saturday and Sunday is Monday"),
        """from weekdays import next_weekday


def test_next_weekday_of_monday_to_thursday_is_the_next_day():
    assert [next_weekday(d) for d in range(4)] == [1, 2, 3, 4]


def test_next_weekday_of_friday_is_monday():
    assert next_weekday(4) == 0


def test_next_weekday_of_saturday_and_sunday_is_monday():
    assert (next_weekday(5), next_weekday(6)) == (0, 0)
""",
        _code("""def next_weekday(day: int) -> int:
    \"\"\"The working day after `day` (0 = Monday).\"\"\"
    return day + 1 if day < 4 else 0"""),
        _code("""def next_weekday(day: int) -> int:
    \"\"\"The working day after `day` (0 = Monday).\"\"\"
    return day + 1 if day < 5 else 0"""),
        "test_next_weekday_of_friday_is_monday",
        "next_weekday only wrapped after Saturday, so Friday gave Saturday (5)",
        "next_weekday in code/weekdays.py returns Monday after Thursday",
        regress=_code("""def next_weekday(day: int) -> int:
    \"\"\"The working day after `day` (0 = Monday).\"\"\"
    return (day + 1) % 5"""),
        regressed="test_next_weekday_of_saturday_and_sunday_is_monday",
    ),
    Unit(
        "rows", "regression", "parse_row(line)", "-> list",
        ("parse_row splits a line at its commas",
         "parse_row keeps commas inside quoted fields",
         "parse_row keeps spaces inside fields"),
        """from rows import parse_row


def test_parse_row_splits_a_line_at_its_commas():
    assert parse_row("a,b,c") == ["a", "b", "c"]


def test_parse_row_keeps_commas_inside_quoted_fields():
    assert parse_row('a,"b,c",d') == ["a", "b,c", "d"]


def test_parse_row_keeps_spaces_inside_fields():
    assert parse_row("a b,c") == ["a b", "c"]
""",
        _code("""import csv


def parse_row(line: str) -> list:
    \"\"\"One CSV line as its fields.\"\"\"
    return next(csv.reader([line]))"""),
        _code("""def parse_row(line: str) -> list:
    \"\"\"One CSV line as its fields.\"\"\"
    return line.split(",")"""),
        "test_parse_row_keeps_commas_inside_quoted_fields",
        "parse_row split at every comma, quoted or not",
        "parse_row in code/rows.py reads the line with csv.reader",
        regress=_code("""import csv


def parse_row(line: str) -> list:
    \"\"\"One CSV line as its fields.\"\"\"
    return [f.replace(" ", "") for f in next(csv.reader([line]))]"""),
        regressed="test_parse_row_keeps_spaces_inside_fields",
    ),
    Unit(
        "doubles", "stuck", "doubled(values)", "-> list",
        ("doubled returns a list with each value twice as big",
         "doubled of an empty list is an empty list",
         "doubled keeps the order of the values"),
        """from doubles import doubled


def test_doubled_returns_a_list_with_each_value_twice_as_big():
    assert doubled([1, 2]) == [2, 4]


def test_doubled_of_an_empty_list_is_an_empty_list():
    assert doubled([]) == []


def test_doubled_keeps_the_order_of_the_values():
    assert doubled([3, 1]) == [6, 2]
""",
        _code("""def doubled(values: list) -> list:
    \"\"\"Each value times two, in order.\"\"\"
    return [v * 2 for v in values]"""),
        _code("""def doubled(values: list) -> list:
    \"\"\"Each value times two, in order.\"\"\"
    return map(lambda v: v * 2, values)"""),
        "test_doubled_returns_a_list_with_each_value_twice_as_big",
        "doubled returned a lazy map object, which never equals a list",
        "doubled in code/doubles.py builds a list",
        variants=tuple(
            _code(f"""def doubled(values: list) -> list:
    \"\"\"Each value times two, in order.\"\"\"
    {pre}return map(lambda v: {expr}, values)""")
            for pre, expr in [
                ("values = list(values)\n    ", "v * 2"),
                ("", "v + v"),
                ("values = tuple(values)\n    ", "2 * v"),
                ("", "int(v) * 2"),
                ("values = [v for v in values]\n    ", "v * 2"),
                ("", "v << 1"),
                ("", "(v * 2)"),
            ]
        ),
        smoke="r = doubles.doubled([1, 2]); assert r == [2, 4], r",
    ),
    Unit(
        "tags", "stuck", "unique_tags(tags)", "-> list",
        ("unique_tags drops repeated tags",
         "unique_tags keeps the first order of the tags",
         "unique_tags lowercases the tags"),
        """from tags import unique_tags


def test_unique_tags_drops_repeated_tags():
    assert unique_tags(["a", "a"]) == ["a"]


def test_unique_tags_keeps_the_first_order_of_the_tags():
    assert unique_tags(["b", "a", "b"]) == ["b", "a"]


def test_unique_tags_lowercases_the_tags():
    assert unique_tags(["A", "a"]) == ["a"]
""",
        _code("""def unique_tags(tags: list) -> list:
    \"\"\"The tags lower-cased, each once, in first order.\"\"\"
    return list(dict.fromkeys(t.lower() for t in tags))"""),
        _code("""def unique_tags(tags: list) -> list:
    \"\"\"The tags lower-cased, each once, in first order.\"\"\"
    seen = set()
    return filter(lambda t: not (t in seen or seen.add(t)), (t.lower() for t in tags))"""),
        "test_unique_tags_drops_repeated_tags",
        "unique_tags returned a lazy filter object, which never equals a list",
        "unique_tags in code/tags.py returns a list built with dict.fromkeys",
        variants=tuple(
            _code(f"""def unique_tags(tags: list) -> list:
    \"\"\"The tags lower-cased, each once, in first order.\"\"\"
    seen = {seen}
    return filter(lambda t: not (t in seen or seen.add(t)), ({expr} for t in tags))""")
            for seen, expr in [
                ("set()", "t.strip().lower()"),
                ("set([])", "t.lower()"),
                ("set()", "t.casefold()"),
                ("{''} - {''}", "t.lower()"),
                ("set()", "str(t).lower()"),
                ("set(())", "t.lower().strip()"),
                ("set()", "t.lower()"),
            ]
        ),
        smoke="r = tags.unique_tags(['a', 'a']); assert r == ['a'], r",
    ),
    Unit(
        "lines", "stuck", "line_totals(lines)", "-> list",
        ("line_totals returns qty times price for each line",
         "line_totals of no lines is an empty list",
         "line_totals keeps the order of the lines"),
        """from lines import line_totals


def test_line_totals_returns_qty_times_price_for_each_line():
    assert line_totals([(2, 150)]) == [300]


def test_line_totals_of_no_lines_is_an_empty_list():
    assert line_totals([]) == []


def test_line_totals_keeps_the_order_of_the_lines():
    assert line_totals([(1, 5), (2, 1)]) == [5, 2]
""",
        _code("""def line_totals(lines: list) -> list:
    \"\"\"qty * price_cents for each (qty, price_cents), in order.\"\"\"
    return [qty * price for qty, price in lines]"""),
        _code("""def line_totals(lines: list) -> list:
    \"\"\"qty * price_cents for each (qty, price_cents), in order.\"\"\"
    return (qty * price for qty, price in lines)"""),
        "test_line_totals_returns_qty_times_price_for_each_line",
        "line_totals returned a generator, which never equals a list",
        "line_totals in code/lines.py returns a list comprehension",
        variants=tuple(
            _code(f"""def line_totals(lines: list) -> list:
    \"\"\"qty * price_cents for each (qty, price_cents), in order.\"\"\"
    return ({expr} for qty, price in {src})""")
            for expr, src in [
                ("price * qty", "lines"),
                ("qty * price", "list(lines)"),
                ("int(qty) * int(price)", "lines"),
                ("qty * price", "tuple(lines)"),
                ("price * int(qty)", "lines"),
                ("(qty * price)", "lines"),
                ("qty * price", "iter(lines)"),
            ]
        ),
        smoke="r = lines.line_totals([(2, 150)]); assert r == [300], r",
    ),
]
