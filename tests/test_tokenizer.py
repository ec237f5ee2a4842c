from mmaudit.data.render import CELL_CLASSES
from mmaudit.models.zoo.tokenizer import ZooTokenizer


def test_roundtrip_and_spelling():
    tok = ZooTokenizer()
    for text in ["what is the value of K ?", "47", "yes", "green", "HELLO", "what is the TAX ?"]:
        assert tok.decode(tok.encode(text)) == text
    assert len(tok.encode("4217")) == 4  # numbers are spelled: a first divergent token exists
    assert len(tok.encode("yes")) == 1


def test_every_cell_class_is_named_by_tokens():
    rows = ZooTokenizer().class_token_map()
    assert len(rows) == len(CELL_CLASSES) and rows[0] == []
    assert all(rows[1:])
