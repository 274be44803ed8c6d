"""Final-answer extraction from model replies: 'Answer: ...' line, \\boxed{...}, last number, code blocks."""

from __future__ import annotations

import re
import unicodedata

from elo_per_token.contracts.prompts import final_answer_line

_NUMBER_RE = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?")
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
    """A number from an answer string: '$1,234.50' -> 1234.5, '12 km' -> 12.0, '3/4' -> 0.75."""
    if text is None:
        return None
    t = text.strip().replace("$", "").replace(",", "")
    frac = re.fullmatch(r"\s*([-+]?\d+)\s*/\s*(\d+)\s*", t)
    if frac and int(frac.group(2)) != 0:
        return int(frac.group(1)) / int(frac.group(2))
    n = last_number(t) if not _NUMBER_RE.fullmatch(t) else t
    if n is None:
        return None
    try:
        return float(n)
    except ValueError:
        return None


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
