"""Final-answer extraction from model replies: 'Answer: ...' line, \\boxed{...}, last number, code blocks."""

from __future__ import annotations

import math
import re
import unicodedata

from elo_per_token.contracts.prompts import final_answer_line

_NUMBER_RE = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_FRACTION_RE = re.compile(r"\s*+([-+]?\d+)\s*+/\s*+(\d+)\s*+")
_CODE_RE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


def normalise(text: str) -> str:
    """Case-, accent-, punctuation- and whitespace-insensitive form; '1,000' and '1000' agree."""
    t = unicodedata.normalize("NFKD", str(text)).encode("ascii", "ignore").decode().lower().strip()
    t = re.sub(r"(?<=\d),(?=\d{3}\b)", "", t)
    t = re.sub(r"^(the|a|an)\s+", "", t)
    t = re.sub(r"[^\w\s.\-]", " ", t)
    t = re.sub(r"\s+", " ", t).strip()
    return t.rstrip(".")


def boxed(text: str) -> str | None:
    """Content of the last \\boxed{...}, with nested braces balanced."""
    i = text.rfind("\\boxed{")
    if i < 0:
        return None
    depth, start = 0, i + len("\\boxed{")
    for j in range(start, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            if depth == 0:
                return text[start:j].strip()
            depth -= 1
    return None


def last_number(text: str) -> str | None:
    found = _NUMBER_RE.findall(text)
    return found[-1].replace(",", "") if found else None


def parse_number(text: str | None) -> float | None:
    """A number from an answer string: '$1,234.50' -> 1234.5, '12 km' -> 12.0, '3/4' -> 0.75.

    Never raises and never returns NaN or an infinity (a reply's number is untrusted: '999…(400 digits)/1'
    overflows a float and '1/777…(5,000 digits)' is past CPython's int-from-string limit); a number that
    is not a finite float is no number.
    """
    if text is None:
        return None
    t = text.strip().replace("$", "").replace(",", "")
    frac = _FRACTION_RE.fullmatch(t)
    if frac and frac.group(2).strip("0"):
        x = _ratio(frac.group(1), frac.group(2))
    else:
        n = last_number(t) if not _NUMBER_RE.fullmatch(t) else t
        if n is None:
            return None
        try:
            x = float(n)
        except ValueError:
            return None
    return x if math.isfinite(x) else None


def _ratio(num: str, den: str) -> float:
    try:
        return int(num) / int(den)  # exact rounding while the ints are of a sane size
    except (ValueError, OverflowError):  # past the int digit limit, or the quotient past the float range
        return float(num) / float(den)  # inf, 0.0 or nan: the caller keeps only finite values


def extract_answer(text: str | None, mode: str = "auto") -> str | None:
    """The final answer of a reply. mode: 'answer' | 'boxed' | 'last_number' | 'auto' (that order)."""
    if not text:
        return None
    if mode in ("answer", "auto"):
        a = final_answer_line(text)
        if a is not None:
            inner = boxed(a)
            return inner if inner is not None else a
        if mode == "answer":
            return None
    if mode in ("boxed", "auto"):
        b = boxed(text)
        if b is not None or mode == "boxed":
            return b
    return last_number(text)


def extract_code(text: str | None) -> str | None:
    """The last fenced Python code block; a reply that is bare code (starts with def/import) counts too."""
    if not text:
        return None
    blocks: list[str] = _CODE_RE.findall(text)
    if blocks:
        return blocks[-1].strip("\n") + "\n"
    stripped = text.strip()
    if stripped.startswith(("def ", "import ", "from ", "class ")):
        return stripped + "\n"
    return None
