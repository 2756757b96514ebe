#!/usr/bin/env python3
"""Write strings.json: the texts whose reference encodings are stored beside it.

Hand-picked cases (contractions, whitespace runs, newlines, digits, accented Latin,
CJK, emoji, code) followed by seeded random mixes of those character groups, so the
file is the same on every run. Usage: python3 make_strings.py OUT.json
"""
import json
import random
import sys

HAND = [
    "Hello world", " Hello", "Hello world!", "The quick brown fox jumps over the lazy dog.",
    "I'm sure they'll say it's fine, we've done what we'd do.", "HELLO'S 'tis", "DON'T WON'T Can'T",
    "it's 'S 'Re 'VE 'M 'LL 'D 'x", "y'all'd've", "'s", "''", "'", "rock'n'roll",
    "  leading spaces and   runs\n\n\ttabs", "hello   ", "a   b", "a \n b", "a\tb", "end   ",
    "a\n\nb", "line one\nline two\r\nline three\rfour", "\n", "\n\n\n", " \n \n ", "\t\t\n  x",
    "para.\n\nNext para!\n", "x  \n  y", "trailing newline\n", "   ", " ", "\r\n", "a\r\n\r\nb",
    "1234567890", "3.14159", "x = 3.14159 + 42;", "1,000,000.50", "2024-05-20", "007 bond",
    "١٢٣ numbers", "12345678901234567890", "v1.2.3-rc4", "0x1F 0b1010 1e-9", "$100 and 50%",
    "naïve café résumé", "Straße façade Ærøskøbing", "Ünïcödé ÀÉÎÕÜ àéîõü", "ǅemal Ǆ",
    "Ελληνικά γράμματα", "Привет, мир!", "עברית", "العربية", "हिन्दी", "ภาษาไทย",
    "日本語のテキスト", "中文字符 和 汉字", "한국어 텍스트", "日本 語", "カタカナ ひらがな",
    "emoji 🚀🔥 done", "😀👍🏽 👨‍👩‍👧‍👦 🇪🇺", "∑∫√∞ ≠ ≤ €£¥", "★☆♥♦", "🙂", "🚀",
    "#include <stdio.h>", "## Heading", "####", "for (int i = 0; i < n; ++i) { a[i] += b[i]; }",
    "def f(x):\n    return x ** 2\n", "if (a && b || !c) return;", "<div class=\"x\">hi</div>",
    "https://example.com/path?q=1&r=2#frag", "user@example.org", "C:\\Windows\\System32",
    "\"quoted\" 'single' `back`", "(parens) [brackets] {braces}", "...!!!???", "--- *** ___",
    "Mr. Smith's dog's bone.", "e.g. i.e. etc.", "O'Neil's", "ABC123def456", "abc123def",
    "x+=42!?", " !!", "?'s", "a\xa0b", "tab\tseparated\tvalues", "   indented code",
    "Long run: " + "=" * 60 + " and " + " " * 40 + "end",
    "Mixed: café 中文 🚀 123 it's\n\tnext",
]

GROUPS = {
    "ascii": list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"),
    "digit": list("0123456789"),
    "punct": list(".,;:!?-_()[]{}<>/\\\"'`~@#$%^&*+=|"),
    "space": [" ", " ", " ", "  ", "\t", "\n", "\n\n", " \n", "\r\n"],
    "latin": list("àáâãäåæçèéêëìíîïñòóôõöøùúûüýÿßÀÉÎÕÜŒœ"),
    "cjk": list("日本語中文字符漢字한국어テキストひらがな"),
    "emoji": ["😀", "🚀", "🔥", "👍", "👍🏽", "🇪🇺", "❤️", "✨", "🙂"],
    "contraction": ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL"],
    "word": ["the", " the", " of", " and", " tokenizer", " Hello", " world", " don't", " I'm",
             " naïve", " 東京", " 42", " 3.14", " —", " …"],
}


def random_string(rng):
    names = list(GROUPS)
    out = []
    for _ in range(rng.randint(1, 14)):
        group = GROUPS[rng.choice(names)]
        out.append("".join(rng.choice(group) for _ in range(rng.randint(1, 4))))
    return "".join(out)


def main():
    rng = random.Random(20240520)
    strings = HAND + [random_string(rng) for _ in range(300 - len(HAND))]
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(strings, f, ensure_ascii=False, indent=0)
        f.write("\n")


if __name__ == "__main__":
    main()
