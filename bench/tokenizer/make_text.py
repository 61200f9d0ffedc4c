#!/usr/bin/env python3
"""Writes the tokenizer benchmark text: >= 10 MB (default) of mixed prose, code, CJK and emoji,
deterministic for a given seed, so every run and every tokenizer library sees the same bytes.
Usage: make_text.py OUT [MEGABYTES] [SEED]"""
import random
import sys

PROSE = [
    "The committee met on Tuesday to review the quarterly budget, and after a long discussion "
    "it agreed to postpone the decision until the auditors' report arrives. ",
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "park, where the trees were tall and the grass was green. ",
    "Les enfants jouaient dans le jardin pendant que leurs parents préparaient le dîner. ",
    "Der schnelle braune Fuchs springt über den faulen Hund; Äpfel und Öl kosten 3,50 €. ",
    "В начале было слово, и слово было у Бога. Москва — столица России. ",
    "Xin chào, tôi là một mô hình ngôn ngữ. Hôm nay trời đẹp quá! ",
]
CODE = [
    "def fibonacci(n: int) -> int:\n    if n < 2:\n        return n\n"
    "    return fibonacci(n - 1) + fibonacci(n - 2)\n\n",
    "for (int i = 0; i < n_tokens; i++) {\n\tsum += logits[i] * 0.5f; // scale\n}\n",
    "SELECT id, name FROM users WHERE created_at > '2024-01-01' ORDER BY id DESC LIMIT 100;\n",
    "{\"model\": \"qwen3\", \"messages\": [{\"role\": \"user\", \"content\": \"Hi!\"}], "
    "\"max_tokens\": 128}\n",
]
CJK = [
    "我们今天去公园散步，天气很好，阳光明媚。人工智能正在改变世界。",
    "東京は日本の首都です。今日はとても暑いですね。カタカナとひらがな。",
    "한국어 텍스트입니다. 오늘 날씨가 좋네요. ",
]
EMOJI = ["😀👍🏽🎉 ", "👩‍👩‍👧‍👦 family ", "🇯🇵🇫🇷 flags ", "❤️‍🔥 ok ✅ "]
NUMBERS = ["3.14159 2718281828 1234567 42 0x7fffffff 1e-9 ", "2024-07-26 12:00:00 UTC "]


def main():
    out = sys.argv[1]
    megabytes = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0
    rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 20260726)
    groups = [(PROSE, 0.45), (CODE, 0.25), (CJK, 0.15), (EMOJI, 0.05), (NUMBERS, 0.10)]
    target = int(megabytes * 1024 * 1024)
    parts, size = [], 0
    while size < target:
        r, acc = rng.random(), 0.0
        for group, weight in groups:
            acc += weight
            if r < acc:
                break
        piece = rng.choice(group)
        parts.append(piece)
        size += len(piece.encode("utf-8"))
    with open(out, "w", encoding="utf-8", newline="") as f:
        f.write("".join(parts))


if __name__ == "__main__":
    main()
