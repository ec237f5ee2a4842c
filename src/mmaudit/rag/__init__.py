"""QIMG-7 + SATR: polluted multimodal-RAG evaluation (scoring of released judged files so far)."""
