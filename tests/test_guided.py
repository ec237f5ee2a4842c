"""Schema-guided decoding on a tiny random Llama: always the schema's JSON, the model's own choice, and a
lockstep batch (shared prefix, masked pads) equal to plain one-prompt forwards."""

import json
import string

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mmaudit.models.chat.guided import BatchDecoder  # noqa: E402
from mmaudit.rag.construct.text_pollution import reply_schema  # noqa: E402
from mmaudit.rag.evaluate import schemas  # noqa: E402
from mmaudit.rag.evaluate.judge_labels import parse_verdict  # noqa: E402
from mmaudit.rag.evaluate.routers import Candidates, parse_json, resolve, self_check, triage  # noqa: E402


@pytest.fixture(scope="module")
def lm():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    chars = list(string.printable)
    vocab = {c: i for i, c in enumerate(["<pad>", "<eos>", "<unk>", *chars])}
    # a few multi-character tokens, so values share and split tokens as with a real BPE
    for w in ("TRUST", "FALL", "BACK", "FULL", "_MM", "TEXT", "_ONLY", "trust", "worthy", "yes", "no", '",', '"'):
        vocab.setdefault(w, len(vocab))
    tk = Tokenizer(models.WordPiece(vocab, unk_token="<unk>", max_input_chars_per_word=10_000,
                                    continuing_subword_prefix=""))
    tk.pre_tokenizer = pre_tokenizers.Sequence([])  # the whole text is one "word": longest-match pieces
    tk.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    return LlamaForCausalLM(cfg).eval(), tok


def _decode(lm, prompts, schema, budget):
    model, tok = lm
    return BatchDecoder(model, tok, [tok(p).input_ids for p in prompts]).fill(schema["schema"], budget)


def _conforms(value, schema) -> bool:
    if "enum" in schema:
        return value in schema["enum"]
    kind = schema["type"]
    if kind == "object":
        return (isinstance(value, dict) and list(value) == list(schema["properties"])
                and all(_conforms(value[k], s) for k, s in schema["properties"].items()))
    if kind == "array":
        return isinstance(value, list) and all(_conforms(v, schema["items"]) for v in value)
    return isinstance(value, str)


ALL = [schemas.SELF_CHECK, schemas.TRIAGE, schemas.TEXT_TRUST, schemas.JUDGE, schemas.CLAIMS,
       schemas.resolver(False), schemas.resolver(True), schemas.resolver(False, {"text_reliability"}),
       reply_schema("Conflicting")]


@pytest.mark.parametrize("schema", ALL, ids=lambda s: s["name"])
def test_every_reply_is_json_of_its_schema(lm, schema):
    prompts = [f"question {i}: " + "abc " * (i % 7) + '{"' for i in range(12)]
    for reply in _decode(lm, prompts, schema, budget=12):
        assert _conforms(json.loads(reply), schema["schema"]), reply
        assert parse_json(reply) == json.loads(reply)


def test_what_the_parsers_make_of_guided_replies(lm):
    """Each component's parser reads the guided reply as parsed, never as a fallback."""
    c = Candidates("p", "t", "m")
    prompts = [f"row {i} " * (1 + i % 3) for i in range(8)]
    assert all(self_check(r)[1] for r in _decode(lm, prompts, schemas.SELF_CHECK, 0))
    assert all(triage(r)[1] for r in _decode(lm, prompts, schemas.TRIAGE, 0))
    assert all(parse_verdict(r)[2] for r in _decode(lm, prompts, schemas.JUDGE, 0))
    assert all(resolve(c, r, True).parsed for r in _decode(lm, prompts, schemas.resolver(True), 4))


def test_a_lockstep_batch_equals_plain_forwards(lm):
    """Prompts sharing a prefix, of different lengths: after the batched prefill, and after rows are fed
    different numbers of tokens, each row's next-token distribution equals a plain forward of its own text."""
    model, tok = lm
    texts = ["shared start a", "shared start hello there", "shared start a much longer prompt than the others"]
    prompts = [tok(t).input_ids for t in texts]
    dec = BatchDecoder(model, tok, prompts)

    def plain(ids):
        with torch.no_grad():
            return torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0, -1], -1)

    for i, p in enumerate(prompts):
        assert torch.allclose(dec.logits[i], plain(p), atol=1e-4)
    extra = [tok("xyz", add_special_tokens=False).input_ids, [], tok("q", add_special_tokens=False).input_ids]
    dec.pending = [list(e) for e in extra]
    dec._flush()
    for i, (p, e) in enumerate(zip(prompts, extra)):
        assert torch.allclose(dec.logits[i], plain(p + e), atol=1e-4)
    dec.pending = [[5], [6, 7], []]
    dec._flush()
    for i, (p, e, f) in enumerate(zip(prompts, extra, ([5], [6, 7], []))):
        assert torch.allclose(dec.logits[i], plain(p + e + f), atol=1e-4)


def test_an_enum_value_is_the_models_own_choice(lm):
    """The chosen value's first token is the most likely of the values' first tokens after the text written
    so far (checked with a separate plain forward of that text)."""
    model, tok = lm
    schema = {"type": "object", "properties": {"d": {"type": "string", "enum": ["TRUST", "FALLBACK", "yes"]}}}
    for i in range(10):
        prompt = f"case {i} " * (1 + i % 4)
        (reply,) = _decode(lm, [prompt], {"schema": schema}, 0)
        context = tok(prompt).input_ids + tok('{"d": "', add_special_tokens=False).input_ids
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([context])).logits[0, -1]
        firsts = {v: tok(v + '"', add_special_tokens=False).input_ids[0] for v in schema["properties"]["d"]["enum"]}
        assert json.loads(reply)["d"] == max(firsts, key=lambda v: float(logits[firsts[v]]))


def test_free_text_stays_within_its_budget(lm):
    schema = {"type": "object", "properties": {"reason": {"type": "string"}, "more": {"type": "string"}}}
    model, tok = lm
    for budget in (0, 3, 10):
        for reply in _decode(lm, ["p q r", "s"], {"schema": schema}, budget):
            d = json.loads(reply)
            used = sum(len(tok(v, add_special_tokens=False).input_ids) for v in d.values())
            assert used <= budget + 2  # decoded pieces re-tokenise within a token or two
            if budget == 0:
                assert d == {"reason": "", "more": ""}
