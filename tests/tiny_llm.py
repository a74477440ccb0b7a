"""A tiny randomly initialised Llama + word-level tokenizer, saved like a Hugging Face model
folder, so the LLM2Vec code path can run offline (tests only; its vectors mean nothing)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

# sentences made of DEFAULT_WORDS, encoded by the backbone tests
TEXTS = [
    "the cat sat on the mat",
    "dog ran",
    "vaccines cause autism is false",
    "the sky is blue and the sea is green",
    "park",
]
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


GEMMA_PROMPTS = {"query": "task: search result | query: ", "document": "title: none | text: "}


def build_tiny_gemma(path: Path, words: Iterable[str] = DEFAULT_WORDS, hidden: int = 32, seed: int = 0) -> Path:
    """A sentence-transformers folder with EmbeddingGemma's architecture at toy size: a randomly
    initialised bidirectional Gemma 3 text model (sliding and full attention layers), mean pooling,
    Dense hidden -> 2*hidden -> hidden without bias, Normalize, and the model card's query and
    document prompts; a word-level tokenizer (prompt words included) that adds <bos> and <eos>."""
    import torch
    from sentence_transformers import SentenceTransformer, models
    from tokenizers import Tokenizer, pre_tokenizers, processors
    from tokenizers import models as tok_models
    from transformers import Gemma3TextConfig, Gemma3TextModel, PreTrainedTokenizerFast

    prompt_words = " ".join(GEMMA_PROMPTS.values()).replace("|", " | ").replace(":", " : ").split()
    words = list(dict.fromkeys(["<pad>", "<eos>", "<bos>", "[UNK]", *prompt_words, *words]))
    vocab = {w: i for i, w in enumerate(words)}
    tok = Tokenizer(tok_models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A <eos>", special_tokens=[
        ("<bos>", vocab["<bos>"]), ("<eos>", vocab["<eos>"])])
    backbone = path / "transformer"
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                            unk_token="[UNK]", model_input_names=["input_ids", "attention_mask"]).save_pretrained(backbone)
    torch.manual_seed(seed)
    cfg = Gemma3TextConfig(
        vocab_size=len(vocab), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=256,
        layer_types=["sliding_attention", "full_attention"], sliding_window=4, use_bidirectional_attention=True,
        pad_token_id=vocab["<pad>"], bos_token_id=vocab["<bos>"], eos_token_id=vocab["<eos>"], initializer_range=0.2)
    Gemma3TextModel(cfg).eval().save_pretrained(backbone)
    identity = torch.nn.Identity()
    st = SentenceTransformer(modules=[
        models.Transformer(str(backbone), max_seq_length=64),
        models.Pooling(hidden, pooling_mode="mean"),
        models.Dense(hidden, 2 * hidden, bias=False, activation_function=identity),
        models.Dense(2 * hidden, hidden, bias=False, activation_function=identity),
        models.Normalize(),
    ], prompts=dict(GEMMA_PROMPTS), device="cpu")
    st.save(str(path / "st"))
    return path / "st"
