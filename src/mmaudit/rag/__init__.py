"""QIMG-7 + SATR: constructing the polluted multimodal-RAG benchmark (construct/) and evaluating a stack and the
trust-routing defences on it (evaluate/)."""
