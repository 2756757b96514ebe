#!/usr/bin/env python3
"""Write splits.json: how Python's `regex` module (the engine GPT-2's encoder.py used;
Debian package python3-regex) splits texts with GPT-2's and Llama 3's pre-tokenizer
patterns. The texts are strings.json's and 400 seeded random mixes of the characters
where the patterns differ (contractions in both cases, U+017F, newlines, CR, other
Unicode spaces, digits of other scripts, combining marks).
Usage: python3 make_splits.py strings.json splits.json
"""
import json
import random
import sys

import regex

PATTERNS = {
    "gpt2": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    "llama3": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}
ALPHABET = list("aZ9'sStTlLdDmMrReEvV .,!?-_()\t\n\r") + [
    "  ", "\r\n", "é", "\u017f", "中", "🚀", "\u00a0", "\u2003", "١", "½", "\u0301", "\u200b",
    "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\u3000"]


def main():
    texts = json.load(open(sys.argv[1], encoding="utf-8"))
    rng = random.Random(31)
    texts += ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 24))) for _ in range(400)]
    out = {"texts": texts}
    for name, pattern in PATTERNS.items():
        compiled = regex.compile(pattern)
        out[name] = [compiled.findall(t) for t in texts]
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
