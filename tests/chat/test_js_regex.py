"""Regex keys behave as JavaScript regexes: every case is checked against a JavaScript engine.

SillyTavern rule (``parseRegexFromString`` in ``public/scripts/utils.js``, used
by ``matchKeys`` in ``public/scripts/world-info.js``): a key is a regex when it
matches ``^/([\\w\\W]+?)/([gimsuy]*)$`` and the pattern has no unescaped ``/``;
``new RegExp`` throwing makes it a plain key. The regex is ``test``-ed on the
scanned text, which starts with ``\\x01`` and joins messages with ``\\n\\x01``.
"""

from __future__ import annotations

import json

import pytest
from quickjs_rs import Runtime

from tavern_agent.chat.js_regex import compile_key

# A JavaScript transcription of the rule above: null when the key is no regex.
JS_RULE = r"""
globalThis.keyTest = (key, text) => {
  const m = key.match(/^\/([\w\W]+?)\/([gimsuy]*)$/);
  if (!m) return null;
  let [, pattern, flags] = m;
  if (pattern.match(/(^|[^\\])\//)) return null;
  pattern = pattern.replace('\\/', '/');
  let re;
  try { re = new RegExp(pattern, flags); } catch (e) { return null; }
  return re.test(text);
};
null;
"""

M = "\x01"  # SillyTavern's start-of-message marker in the scanned text

# (key, text, why): each row is a difference between JavaScript and Python regexes.
CASES = [
    ("/^Seraphina/", f"{M}Seraphina: hello", "text starts with \\x01: ^ never sees the name"),
    ("/^Seraphina/m", f"{M}x\n{M}Seraphina: hi", "^ with m: after \\n comes \\x01 first"),
    (f"/^{M}Seraphina/", f"{M}Seraphina: hi", "a key may spell the marker"),
    ("/forest$/", f"{M}the forest\n", "$ is the very end, not before a final \\n"),
    ("/forest$/m", f"{M}the forest\r{M}x", "$ with m: \\r ends a line too"),
    ("/a.b/", "a\rb", ". stops at \\r"),
    ("/a.b/", "a\u2028b", ". stops at U+2028"),
    ("/a.b/s", "a\nb", ". with s: any character"),
    ("/\\bcafé\\b/", "un café noir", "\\b is ASCII-only: é is no word character"),
    ("/\\bcafé/", "un café noir", "\\b before c"),
    ("/caf\\w/", "café", "\\w is ASCII-only"),
    ("/\\d/", "٣", "\\d is ASCII-only (Arabic-Indic three)"),
    ("/\\s/", "a\u3000b", "\\s covers U+3000"),
    ("/\\s/", "a\u0085b", "\\s does not cover U+0085 (Python's does)"),
    ("/\\W/", "é", "\\W covers é"),
    ("/[\\W]/", "é", "\\W inside a class"),
    ("/[^\\W]/", "é", "negated \\W inside a class"),
    ("/[^\\da]/", "5a", "negated class with \\d"),
    ("/(?<who>Sera)\\k<who>/", "SeraSera", "named group and its back reference"),
    ("/(?<who>Sera)phina/i", "SERAPHINA", "named group with i"),
    ("/x/q", "/x/q", "invalid flag: the whole key is plain text (no regex)"),
    ("/x/gg", "x", "a repeated flag: RegExp throws, plain text"),
    ("/x/gimsuy", "X", "every valid flag at once"),
    ("/a/y", "ba", "y: only at the start"),
    ("/\\x01b/y", f"{M}b", "y: matching the marker at the start"),
    ("/a/b/", "a/b", "an unescaped slash: not a regex"),
    ("/a\\/b/", "a/b", "an escaped slash is a slash"),
    ("/a{,3}/", "a{,3}", "{,3} is no quantifier in JavaScript: literal"),
    ("/a{2}/", "aa", "a real quantifier"),
    ("/a{3,2}/", "aaa", "numbers out of order: RegExp throws"),
    ("/a}/", "a}", "a lone } is literal"),
    ("/a]/", "a]", "a lone ] is literal"),
    ("/[^]/", "\n", "[^] is any character"),
    ("/a[]/", "a", "[] matches nothing"),
    ("/a**/", "aa", "a quantified quantifier: RegExp throws"),
    ("/a++/", "aa", "no possessive quantifiers in JavaScript"),
    ("/(?i)a/", "A", "no inline flags in JavaScript"),
    ("/(?P<n>a)/", "a", "no Python-style named groups"),
    ("/*a/", "a", "nothing to repeat"),
    ("/\\A/", "A", "\\A is a literal A"),
    ("/\\Z/", "Z", "\\Z is a literal Z"),
    ("/\\1(a)/", "a", "a forward reference matches empty"),
    ("/(a)\\1/", "aa", "a back reference"),
    ("/(a)?\\1b/", "b", "a reference to a group that took no part matches empty"),
    ("/(a\\1)+/", "aa", "a reference inside its own group matches empty"),
    ("/(?<n>x)?\\k<n>y/", "y", "a named reference to a group that took no part"),
    ("/\\8/", "8", "\\8 without groups is a literal 8"),
    ("/\\101/", "A", "a legacy octal escape"),
    ("/\\cJ/", "\n", "\\cJ is a newline"),
    ("/\\u00e9/i", "É", "\\u escape with i"),
    ("/é/i", "É", "case folding beyond ASCII"),
    ("/[a-z]+/", "ABC", "ranges are case-sensitive without i"),
    ("/[a-z]+/i", "ABC", "ranges with i"),
    ("/[\\w-]+x/", "a-x", "- after a class escape is literal"),
    ("/[a\\-z]/", "-", "escaped - in a class"),
    ("/(?<=Sera)phina/", "Seraphina", "lookbehind"),
    ("/Sera(?!phina)/", "Seraphina", "negative lookahead"),
    ("/\\bSera\\B/", "Seraphina", "\\B"),
    ("/[\\b]/", "\b", "\\b in a class is a backspace"),
    ("/\\//", "a/b", "only an escaped slash as the pattern"),
    ("/森林/", "我们在森林里", "CJK pattern"),
    ("/\\p{L}/u", "a", "\\p needs u (property escapes stay out: untranslatable)"),
    ("/\\p{L}/", "p{L}", "without u, \\p is a literal p"),
    ("/a\\-b/u", "a-b", "\\- is allowed in u mode"),
    ("/a\\qb/u", "aqb", "an identity escape of a letter is an error in u mode"),
]


@pytest.fixture(scope="module")
def js() -> object:
    runtime = Runtime()
    context = runtime.new_context()
    context.eval(JS_RULE)
    return context


def _js_result(js: object, key: str, text: str) -> bool | None:
    script = f"JSON.stringify(keyTest({json.dumps(key)}, {json.dumps(text)}))"
    return json.loads(js.eval(script))  # type: ignore[attr-defined]


@pytest.mark.parametrize(("key", "text", "why"), CASES, ids=[c[2] for c in CASES])
def test_regex_key_matches_like_javascript(js: object, key: str, text: str, why: str) -> None:
    expected = _js_result(js, key, text)
    if key.startswith("/\\p{L}/u"):
        from tavern_agent.chat.js_regex import Untranslatable

        with pytest.raises(Untranslatable):
            compile_key(key)
        return
    compiled = compile_key(key)
    ours = None if compiled is None else compiled.test(text)
    assert ours == expected, why
