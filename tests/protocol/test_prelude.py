"""Each script is loaded with the part of ``_prelude.lua`` it uses (antre/protocol/prelude.py):
nothing it names may be missing, and what it does not name is left out."""

from __future__ import annotations

import re
from pathlib import Path

import antre.protocol
import pytest
import redis
from antre.protocol import prelude, scripts

PROTOCOL = Path(antre.protocol.__file__).parent
PRELUDE = (PROTOCOL / "_prelude.lua").read_text()
SCRIPTS = sorted(path.stem for path in PROTOCOL.glob("*.lua") if not path.stem.startswith("_"))

TOY_PRELUDE = """\
-- header
local function a() return 1 end

-- b calls a
local function b()
  return a()
end
local C, D = {x = 1}, 2
local function e() return C end
-- trailing comment
"""


def test_the_definitions_hold_the_whole_prelude_in_order() -> None:
    found = prelude.definitions(PRELUDE)
    assert "\n".join(definition.text for definition in found) == PRELUDE.rstrip("\n")
    assert found[0].names == ("now_ms",) and found[0].text.startswith("-- Shared helpers")


def test_a_script_gets_what_it_names_and_what_that_names_in_the_preludes_order() -> None:
    assert prelude.needed_by(TOY_PRELUDE, "return b()") == (
        "-- header\nlocal function a() return 1 end\n\n-- b calls a\nlocal function b()\n"
        "  return a()\nend")
    assert prelude.needed_by(TOY_PRELUDE, "return e() + a()") == (
        "-- header\nlocal function a() return 1 end\n"
        "local C, D = {x = 1}, 2\nlocal function e() return C end\n-- trailing comment")
    assert prelude.needed_by(TOY_PRELUDE, "return D") == "local C, D = {x = 1}, 2"


def test_a_name_only_in_a_whole_line_comment_brings_nothing_and_a_string_keeps_it() -> None:
    assert prelude.needed_by(TOY_PRELUDE, "-- calls b()\n  -- and e\nreturn 1") == ""
    assert "local function b()" in prelude.needed_by(TOY_PRELUDE, "return 'b' -- not e")
    assert "local function e()" in prelude.needed_by(TOY_PRELUDE, "return 'b' -- not e")


def test_code_before_the_first_definition_is_refused() -> None:
    with pytest.raises(ValueError, match="code before its first definition"):
        prelude.definitions("redis.call('PING')\nlocal function a() end\n")


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_script_compiles_and_defines_each_helper_it_names(
        redis_client: redis.Redis, name: str) -> None:
    script = scripts.load(name)
    assert redis_client.script_load(script.text) == script.sha  # Redis compiled it
    words = prelude.used_words(script.text)
    helpers = {n for definition in prelude.definitions(PRELUDE) for n in definition.names}
    defined = set(re.findall(r"^local (?:function )?(\w+(?:\s*,\s*\w+)*)", script.text, re.M))
    defined_names = {n.strip() for group in defined for n in group.split(",")}
    assert (words & helpers) - defined_names == set()


def test_a_script_that_uses_few_helpers_is_loaded_without_the_others() -> None:
    workers = scripts.load("workers").text
    assert "local function pack_record" not in workers
    assert len(workers) < len(PRELUDE) / 10
    assert "local function pack_record" in scripts.load("ack").text


@pytest.mark.parametrize(("seconds", "micros", "expected"), [
    ("1733600000", "0", "1733600000000"), ("1733600000", "5", "1733600000000"),
    ("1733600000", "999", "1733600000000"), ("1733600000", "5123", "1733600000005"),
    ("1733600000", "99999", "1733600000099"), ("1733600000", "100000", "1733600000100"),
    ("1733600000", "999999", "1733600000999")])
def test_the_clock_as_text_is_the_clock_in_milliseconds(redis_client: redis.Redis, seconds: str,
                                                         micros: str, expected: str) -> None:
    """now_ms_text (TIME's text joined, no number conversions) against now_ms for every width
    of TIME's microseconds, which it pads: a TIME of our own in place of Redis's."""
    script = ("local redis = {call = function() return {ARGV[1], ARGV[2]} end}\n"
              + prelude.needed_by(PRELUDE, "now_ms now_ms_text")
              + "\nreturn {now_ms_text(), tostring(now_ms())}")
    text, number = redis_client.eval(script, 0, seconds, micros)
    assert text == expected
    assert number == expected


def _eval_with(redis_client: redis.Redis, names: str, body: str, *args: str) -> object:
    """``body`` run after the prelude definitions ``names`` name, with ``args`` as ARGV."""
    return redis_client.eval(prelude.needed_by(PRELUDE, names) + "\n" + body, 0, *args)


@pytest.mark.parametrize("text", ["0", "1", "2", "31", "1733600000123", "9007199254740991",
                                  "1e20", "-4", "2.5", "0.1", "-0.75", "123456789012.5"])
def test_a_number_written_once_per_call_is_written_as_before(redis_client: redis.Redis,
                                                             text: str) -> None:
    """decimal() gives the text Redis stored when the scripts handed it the number itself
    (redis.call: %.17g) for an integer, and what a join writes (%.14g) for any other; asked
    twice in a call, it answers the same."""
    stored = _eval_with(redis_client, "decimal", """
local n = tonumber(ARGV[1])
redis.call('SET', 'given', n)
return {decimal(n), decimal(n), redis.call('GET', 'given'), '' .. n}""", text)
    first, again, as_redis_wrote, as_joined = stored  # type: ignore[misc]
    assert first == again
    number = float(text)
    assert first == (as_redis_wrote if number.is_integer() else as_joined)


def test_hex_and_decimal_take_what_a_table_cannot_hold(redis_client: redis.Redis) -> None:
    """NaN cannot be a table key: converted each time as tostring and string.format do, never
    remembered (an error otherwise); 2^53 and beyond as a join writes them."""
    assert _eval_with(redis_client, "decimal hex", """
local nan = 0 / 0
return {decimal(nan), decimal(nan), tostring(nan), hex(nan) == string.format('%x', nan),
  hex(255), hex(255), decimal(2^53), hex(0)}""") == [
        "-nan", "-nan", "-nan", 1, "ff", "ff", "9.007199254741e+15", "0"]


@pytest.mark.parametrize("text", ["0", "7", "007", "42", "12345678901234", "123456789012345",
                                  "-3", "1.5", "", "abc"])
def test_an_integer_written_as_json_text_is_what_cjson_wrote(redis_client: redis.Redis,
                                                             text: str) -> None:
    ours, cjsons = _eval_with(  # type: ignore[misc]
        redis_client, "json_integer json_integer_text",
        "return {json_integer_text(ARGV[1]), cjson.encode(json_integer(ARGV[1]))}", text)
    assert ours == cjsons
