"""Parity fixtures for tubelet's CLIP tokenizer (src/text/clip_tokenizer.c, tests/test_tokenizer.c).

Writes tests/fixtures/tokenizer/:
  clip_small/   vocab.json, merges.txt, tokenizer_config.json, special_tokens_map.json of a small
                byte-level BPE trained by the `tokenizers` library configured as CLIP's (byte-level
                alphabet with every byte also as a `</w>` word end, CLIP's normaliser and
                pre-tokeniser), saved by transformers' CLIPTokenizer.
  clip_unk/     the same trainer on a narrow alphabet (ASCII letters, no `</w>` bytes added),
                pad token "!" and openai/clip's added_tokens_decoder (bos matched after
                normalisation): the unknown-token path, a pad id other than eos, normalised
                special tokens.
  cases.json    [{text, ids, ids16, pre}] for every test string: transformers' CLIPTokenizer ids
                (padding="max_length", truncation, max_length 77 and 16) for clip_small,
                ids_unk for clip_unk, and the fast tokenizer's pre-tokens (pre_tokenize_str of the
                normalised text), which do not depend on the vocabulary: CLIP's real pattern.
  classes.json  every code point's class under the fast tokenizer's regexes (Oniguruma): the
                ranges of \\s (the normaliser's whitespace), \\p{L} and \\p{N}, and the lowercase
                map (the code points Lowercase changes), so the C test can compare PCRE2 and
                utf8proc against all of Unicode.

Run with /work/venv/bin/python (transformers 5.23, tokenizers 0.23):
  python tools/make_tokenizer_fixtures.py [OUT_DIR]
"""
import json
import os
import random
import shutil
import sys

import transformers
from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers
from transformers import CLIPTokenizer

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "tokenizer")
BOS, EOS = "<|startoftext|>", "<|endoftext|>"


def clip_backend(tok):
    """The normaliser and pre-tokeniser CLIPTokenizer sets (read from transformers, not retyped)."""
    ref = CLIPTokenizer(vocab={BOS: 0, EOS: 1}, merges=[])
    tok.normalizer = ref.backend_tokenizer.normalizer
    tok.pre_tokenizer = ref.backend_tokenizer.pre_tokenizer
    return tok


def corpus():
    words = ("a photo of the cat dog person walking running falling sitting video playing guitar "
             "forklift reversing someone is are was it's don't we've they're I'm you'll he'd "
             "café naïve résumé über straße école garçon 東京 北京 日本語 こんにちは 안녕하세요 "
             "привет мир Ελλάδα 123 2024 3.14 hello world the quick brown fox jumps over lazy "
             "!!! ... ?? -- (x) [y] {z} #tag @user 😀 👍 🎉").split()
    rng = random.Random(1)
    syll = [a + b for a in "bcdfghklmnprstvwz" for b in "aeiou"] + ["é", "ß", "ñ", "東", "語", "😀"]
    for _ in range(3000):
        yield " ".join(rng.choice(words) for _ in range(rng.randint(3, 12)))
        # made-up words (Zipf-like syllable frequencies) give the trainer merges to learn
        yield " ".join("".join(syll[min(int(rng.paretovariate(0.7)) - 1, len(syll) - 1)]
                               for _ in range(rng.randint(1, 5))) for _ in range(8))


def train(vocab_size, alphabet, end_bytes):
    tok = clip_backend(Tokenizer(models.BPE(unk_token=EOS, end_of_word_suffix="</w>")))
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[BOS, EOS],
                                  initial_alphabet=alphabet, end_of_word_suffix="</w>",
                                  show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    model = json.loads(tok.to_str())["model"]
    vocab, merges = model["vocab"], [tuple(m) if isinstance(m, list) else tuple(m.split(" "))
                                     for m in model["merges"]]
    if end_bytes:  # CLIP's vocabulary holds every byte both plain and as a word end
        for ch in alphabet:
            if ch + "</w>" not in vocab:
                vocab[ch + "</w>"] = len(vocab)
    return vocab, merges


def save(d, vocab, merges, added_tokens_decoder=None, **kw):
    """vocab.json + merges.txt (as the Hub's CLIP checkpoints ship them) and the configs that
    transformers' save_pretrained writes (plus added_tokens_decoder if given, as the Hub's
    tokenizer_config.json has it); then the tokenizer a user gets from the directory."""
    shutil.rmtree(d, ignore_errors=True)
    CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=77, **kw).save_pretrained(d)
    os.remove(os.path.join(d, "tokenizer.json"))  # so that from_pretrained reads the two files
    if added_tokens_decoder:
        path = os.path.join(d, "tokenizer_config.json")
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
        cfg["added_tokens_decoder"] = added_tokens_decoder
        with open(path, "w", encoding="utf-8") as f:
            json.dump(cfg, f, indent=2)
    with open(os.path.join(d, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(d, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    return CLIPTokenizer.from_pretrained(d)


def strings():
    s = [
        "", " ", "   ", "\t", "\n", " \t\n \r\n ", "a", "A", "Hello World", "HELLO world",
        "a photo of a cat", "A PHOTO OF A CAT.", "someone is falling", "is the forklift reversing?",
        "it's", "It's", "IT'S", "don't", "DON'T", "we've they're I'm you'll he'd",
        "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'ll've", "''s", "'", "''", "x's's",
        "o'clock", "rock'n'roll", "l'école", "‘quotes’ and ’s", "can’t",
        "123", "2024", "3.14159", "1,000,000", "abc123def", "v2.0-beta", "00007", "١٢٣ ٤٥",
        "½ ² ³ Ⅻ ⑤", "x²+y²=z²", "!", "!!!", "?!?!", "...", "--", "(x) [y] {z}", "#tag @user",
        "a+b=c", "e-mail", "C++", "foo_bar", "$100", "100%", "~`!@#$%^&*()_+-=[]{}|;:,.<>/?",
        "\\backslash\\", "\"quoted\"", "café", "CAFÉ", "naïve", "résumé", "über", "Straße",
        "STRASSE", "école", "garçon", "ÀÉÎÕÜ", "İstanbul", "ǅemal", "ΣΊΣΥΦΟΣ", "Ελλάδα",
        "привет мир", "ПРИВЕТ", "東京", "北京 日本語", "こんにちは", "カタカナ", "안녕하세요",
        "中文，标点。", "全角！？", "ｆｕｌｌｗｉｄｔｈ", "ＡＢＣ１２３", "שלום", "مرحبا", "हिन्दी",
        "ไทย", "ქართული", "😀", "👍👍", "🎉 party 🎉", "I ❤ NY", "👨‍👩‍👧‍👦", "👩🏽‍💻", "🏳️‍🌈",
        "🇫🇷🇩🇪", "a😀b", "😀123", "e\u0301", "cafe\u0301", "A\u030a", "n\u0303o", "\u1100\u1161",
        "o\u0308\u0304", "a\u0301\u0301", "\u0301", "x\u0307", "\u212b", "\u2126", "ﬁ ligature",
        "tab\tseparated\tvalues", "new\nline", "multiple   spaces", "  leading", "trailing  ",
        "\u00a0nbsp\u00a0", "em\u2003space", "line\u2028sep", "zero\u200bwidth", "soft\u00adhyphen",
        "\u3000ideographic\u3000", "\x0bvt\x0cff", "\x85nel", "ctrl\x01\x02\x7f", "bell\x07",
        "<|startoftext|>", "<|endoftext|>", "hello <|endoftext|> world", "<|STARTOFTEXT|>",
        "<|endoftext|><|endoftext|>", "a<|endoftext|>b", "<|endof", "<|", "|>",
        "<|StartOfText|>x", "  <|startoftext|>  y", "<|startoftext|>\u0301", "<|ENDOFTEXT|>!!",
        "<|endoftext|>!!", "C## and ### #", "<|start\u00adoftext|>",
        "a video of a person playing guitar", "The quick brown fox jumps over the lazy dog.",
        "the the the the", "aaaaaaaaaaaaaaaa", "abababababab", "catcatcat", "Dog's toy", "dogs'",
        "U.S.A.", "e.g.", "Mr. O'Neil", "3am", "10:30pm", "2x2", "1st 2nd 3rd 4th",
        "   !!!   ???   ", "...   ...", "-", "--flag", "-5", "+5", "\ufeffbom", "\ufffd",
        "𝐁𝐨𝐥𝐝", "𝔉𝔯𝔞𝔨𝔱𝔲𝔯", "ℌ", "℃", "Ⅳ", "Ⓐ", "🄰", "\U0001f600\U0001f601\U0001f602",
        "mixed 東京 and café 😀 123", "a" * 100, "word " * 100, "😀" * 60, "1" * 100,
        "a photo of " * 30, ("Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 6),
        "!" * 80, " " * 50, "\t" * 20 + "x", "'s" * 40,
    ]
    rng = random.Random(31)
    pieces = ["a", "Z", "é", "E\u0301", "ß", "東", "ん", "한", "я", "Ω", "ا", "1", "9", "٣", "½",
              " ", "  ", "\t", "\n", ".", ",", "!", "'", "'s", "'LL", "-", "😀", "👍🏿", "‍", "\u200b",
              "\u00a0", "<", "|", ">", "#", "word", "Video", "CAT", "don't", "x2"]
    while len(s) < 260:
        s.append("".join(rng.choice(pieces) for _ in range(rng.randint(1, 14))))
    return s


def code_point_classes():
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    text = "".join(map(chr, cps))

    def ranges(pattern):
        """Code points the Oniguruma pattern matches (one code point each): as [lo, hi] ranges."""
        kept = set()  # "removed" drops the matches and keeps the rest
        for piece, _ in pre_tokenizers.Split(Regex(pattern), behavior="removed").pre_tokenize_str(text):
            kept.update(map(ord, piece))
        hit = [c for c in cps if c not in kept]
        out = []
        for c in hit:
            if out and out[-1][1] == c - 1:
                out[-1][1] = c
            else:
                out.append([c, c])
        return out

    low = normalizers.Lowercase()
    lower = {}
    for c in cps:
        r = low.normalize_str(chr(c))
        if r != chr(c):
            lower[c] = [ord(x) for x in r]
    return {"space": ranges(r"\s"), "letter": ranges(r"\p{L}"), "number": ranges(r"\p{N}"),
            "lower": [[c] + v for c, v in sorted(lower.items())]}


def main():
    os.makedirs(OUT, exist_ok=True)
    byte_alpha = pre_tokenizers.ByteLevel.alphabet()  # the 256 characters bytes map to
    vocab, merges = train(1500, byte_alpha, True)
    # merges that start with '#' are merges (tokenizers skips "#version" lines only)
    vocab["##</w>"], vocab["##"] = len(vocab), len(vocab) + 1
    merges = [("#", "#</w>"), ("#", "#")] + merges
    small = save(os.path.join(OUT, "clip_small"), vocab, merges)
    vocab, merges = train(300, [chr(c) for c in range(ord("a"), ord("z") + 1)], False)
    # the special tokens' flags of openai/clip-vit-base-patch32's tokenizer_config.json: the
    # start token is matched after normalisation ("<|STARTOFTEXT|>" is the bos id), the end
    # token verbatim
    flags = {"lstrip": False, "rstrip": False, "single_word": False, "special": True}
    unk = save(os.path.join(OUT, "clip_unk"), vocab, merges, pad_token="!", added_tokens_decoder={
        str(vocab[BOS]): {"content": BOS, "normalized": True, **flags},
        str(vocab[EOS]): {"content": EOS, "normalized": False, **flags}})
    pre = small.backend_tokenizer.pre_tokenizer
    norm = small.backend_tokenizer.normalizer
    cases = []
    for t in strings():
        cases.append({
            "text": t,
            "ids": small(t, padding="max_length", truncation=True, max_length=77)["input_ids"],
            "ids16": small(t, padding="max_length", truncation=True, max_length=16)["input_ids"],
            "ids_unk": unk(t, padding="max_length", truncation=True, max_length=77)["input_ids"],
            "pre": [p for p, _ in pre.pre_tokenize_str(norm.normalize_str(t))],
        })
    meta = {"transformers": transformers.__version__, "tokenizers": __import__("tokenizers").__version__,
            "cases": cases}
    with open(os.path.join(OUT, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, ensure_ascii=True, separators=(",", ":"))
    with open(os.path.join(OUT, "classes.json"), "w", encoding="utf-8") as f:
        json.dump(code_point_classes(), f, separators=(",", ":"))
    print(f"{len(cases)} cases -> {OUT}")


if __name__ == "__main__":
    main()
