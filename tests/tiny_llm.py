"""A tiny randomly initialised Llama + word-level tokenizer, saved like a Hugging Face model
folder, so the LLM2Vec code path can run offline (tests only; its vectors mean nothing)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

DEFAULT_WORDS = ("[UNK] <s> </s> Given a claim , retrieve documents : the cat sat on mat dog ran in "
                 "park vaccines cause autism is false true red blue green sky sea").split()


def build_tiny_llama(path: Path, words: Iterable[str] = DEFAULT_WORDS, hidden: int = 32, seed: int = 0) -> Path:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaModel, PreTrainedTokenizerFast

    words = list(dict.fromkeys(["[UNK]", "<s>", "</s>", *words]))
    vocab = {w: i for i, w in enumerate(words)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="[UNK]",
        model_input_names=["input_ids", "attention_mask"],
    ).save_pretrained(path)
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(vocab), hidden_size=hidden, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, intermediate_size=2 * hidden, max_position_embeddings=512,
        bos_token_id=vocab["<s>"], eos_token_id=vocab["</s>"], initializer_range=0.2,
    )
    LlamaModel(cfg).save_pretrained(path)
    return path
