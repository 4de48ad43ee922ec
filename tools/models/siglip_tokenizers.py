"""The tokenizer files of the SigLIP test folders, built from the committed fixture text with
the `tokenizers` package and no training randomness (the same corpus always gives the same
files): a Gemma-shaped byte-fallback BPE for SigLIP 2 and a T5-shaped Unigram for SigLIP 1, with
their tokenizer_config.json and special_tokens_map.json as the hub's checkpoints carry them."""
import re

from .files import FIXTURE_TEXT

# the text towers' context: texts are padded to exactly 64 tokens (by tokenizer.json for SigLIP 2,
# by tokenizer_config.json for SigLIP 1)
SIGLIP_CONTEXT = 64
# string.punctuation less "<", ">" and "/": the Replace step that google/siglip-base-patch16-224's
# tokenizer.json is reported to carry (the slow SiglipTokenizer strips all of string.punctuation)
SIGLIP_PUNCTUATION = "!\"#$%&'()*+,-.:;=?@[\\]^_`{|}~"
# ... as a character class escaping only what a class needs (\\ \] \[ \^ \-): Python's
# re.escape would also write \# \& \~, which the Rust regex engines need not accept
SIGLIP_PUNCTUATION_CLASS = r"""[!"#$%&'()*+,\-.:;=?@\[\\\]\^_`{|}~]"""


def siglip_corpus_lines():
    return [line.rstrip("\n") for line in open(FIXTURE_TEXT, encoding="utf-8") if line.strip()]


def learn_bpe(words, max_merges=4000):
    """Plain BPE over a word -> count table: repeatedly merge the most frequent adjacent pair seen
    at least twice, ties broken by the pair itself (so the same corpus always gives the same
    merges; the package's BpeTrainer breaks ties in hash order)."""
    from collections import Counter

    table = {tuple(w): n for w, n in sorted(words.items())}
    merges = []
    for _ in range(max_merges):
        pairs = Counter()
        for symbols, n in table.items():
            for pair in zip(symbols, symbols[1:]):
                pairs[pair] += n
        if not pairs:
            break
        best, count = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))
        if count < 2:
            break
        merges.append(best)
        merged = {}
        for symbols, n in table.items():
            out, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:
                    out.append(symbols[i] + symbols[i + 1])
                    i += 2
                else:
                    out.append(symbols[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + n
        table = merged
    return merges


SIGLIP2_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]  # Gemma's ids 0..4


def siglip2_tokenizer():
    """A Gemma-shaped tokenizer.json as SigLIP 2 ships it: spaces become "▁" in the normaliser (no
    dummy prefix, no pre-tokenizer), byte-fallback BPE (<0x00>..<0xFF> for anything unseen), no
    <bos>, <eos> = 1 appended, and the file's own truncation to 64 and padding to exactly 64 with
    <pad> = 0 on the right. The vocabulary is learned from the lower-cased fixture text: upper-case
    letters only come out right if the caller lower-cases (tokenizer_config.json's do_lower_case)."""
    from collections import Counter

    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, processors

    words = Counter()
    for line in siglip_corpus_lines():
        words.update(re.findall(r"▁?[^▁]+|▁", line.lower().replace(" ", "▁")))
    merges = learn_bpe(words)
    chars = sorted({c for w in words for c in w})
    vocab = SIGLIP2_SPECIALS + [f"<0x{b:02X}>" for b in range(256)] + chars
    for a, b in merges:
        if a + b not in vocab:
            vocab.append(a + b)
    tok = Tokenizer(models.BPE({t: i for i, t in enumerate(vocab)}, merges, unk_token="<unk>", fuse_unk=True,
                               byte_fallback=True))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SIGLIP2_SPECIALS])
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.post_processor = processors.TemplateProcessing(single="$A <eos>", pair="$A <eos> $B <eos>",
                                                       special_tokens=[("<eos>", 1)])
    tok.enable_truncation(SIGLIP_CONTEXT)
    tok.enable_padding(direction="right", pad_id=0, pad_token="<pad>", length=SIGLIP_CONTEXT)
    return tok


SIGLIP_SPECIALS = ["<pad>", "</s>", "<unk>"]  # T5's ids 0..2


def siglip_normalizer():
    from tokenizers import Regex, normalizers

    return normalizers.Sequence([
        normalizers.Replace(Regex(SIGLIP_PUNCTUATION_CLASS), ""),
        normalizers.Replace(Regex(r"\s+"), " "),
        normalizers.Strip(left=True, right=True),
        normalizers.NFKC(),  # stands in for the real file's Precompiled (nmt_nfkc) charsmap
        normalizers.Replace(Regex(" {2,}"), " "),
    ])


def siglip_tokenizer():
    """A T5-shaped Unigram tokenizer.json as SigLIP 1's: punctuation removed and whitespace
    collapsed in the normaliser, Metaspace (prefix "▁" always), "$A </s>" with </s> = 1, <unk> = 2,
    and NO padding or truncation in the file (SigLIP 1's come from tokenizer_config.json:
    pad_token "</s>", model_max_length 64, right side; and do_lower_case: the file does not
    lower-case and its vocabulary has no upper-case letters). Pieces: every character, and every
    substring of a "▁word" of the lower-cased fixture text seen at least twice, scored by its log
    frequency, so the Viterbi search has real choices to make."""
    from collections import Counter
    from math import log

    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    normalizer = siglip_normalizer()
    counts = Counter()
    for line in siglip_corpus_lines():
        for word in normalizer.normalize_str(line.lower()).split(" "):
            w = "▁" + word
            for i in range(len(w)):
                for j in range(i + 1, min(len(w), i + 8) + 1):
                    counts[w[i:j]] += 1
    pieces = {p: n for p, n in counts.items() if len(p) == 1 or n >= 2}
    total = sum(pieces.values())
    scored = sorted(((p, log(n / total)) for p, n in pieces.items()), key=lambda ps: (-ps[1], ps[0]))
    vocab = [(t, 0.0) for t in SIGLIP_SPECIALS] + scored
    tok = Tokenizer(models.Unigram(vocab, unk_id=2, byte_fallback=False))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SIGLIP_SPECIALS])
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                       special_tokens=[("</s>", 1)])
    return tok


def added_tokens_decoder(specials, strip=()):
    return {str(i): {"content": t, "lstrip": t in strip, "normalized": False, "rstrip": t in strip,
                     "single_word": False, "special": True} for i, t in enumerate(specials)}


def siglip_tokenizer_files(family):
    """(tokenizer, tokenizer_config.json, special_tokens_map.json) of a family, as the hub's."""
    if family == "siglip2":
        config = {"add_bos_token": False, "add_eos_token": True,
                  "added_tokens_decoder": added_tokens_decoder(SIGLIP2_SPECIALS),
                  "bos_token": "<bos>", "clean_up_tokenization_spaces": False,
                  # written by transformers' SigLIP 2 conversion (GemmaTokenizerFast ignores it;
                  # transformers >= 5 lower-cases SigLIP 2 text in its Siglip2Tokenizer class)
                  "do_lower_case": True, "eos_token": "<eos>", "extra_special_tokens": {},
                  "mask_token": "<mask>", "model_input_names": ["input_ids"],
                  # Gemma's "no limit" figure, bigger than any u64: the 64 is in tokenizer.json
                  "model_max_length": 1000000000000000019884624838656,
                  "pad_token": "<pad>", "padding_side": "right", "processor_class": "SiglipProcessor",
                  "sp_model_kwargs": {}, "spaces_between_special_tokens": False,
                  "tokenizer_class": "GemmaTokenizer", "unk_token": "<unk>", "use_default_system_prompt": False}
        special = {"bos_token": "<bos>", "eos_token": "<eos>", "mask_token": "<mask>", "pad_token": "<pad>",
                   "unk_token": "<unk>"}
        return siglip2_tokenizer(), config, special
    config = {"added_tokens_decoder": added_tokens_decoder(SIGLIP_SPECIALS, strip=SIGLIP_SPECIALS[1:]),
              "additional_special_tokens": [], "clean_up_tokenization_spaces": True, "do_lower_case": True,
              "eos_token": "</s>", "model_input_names": ["input_ids"], "model_max_length": SIGLIP_CONTEXT,
              "pad_token": "</s>", "processor_class": "SiglipProcessor", "sp_model_kwargs": {},
              "tokenizer_class": "SiglipTokenizer", "unk_token": "<unk>"}  # no padding_side: right
    special = {"eos_token": "</s>", "pad_token": "</s>", "unk_token": "<unk>"}
    return siglip_tokenizer(), config, special
