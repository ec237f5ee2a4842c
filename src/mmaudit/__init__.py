"""mmaudit: audit how far the visual channel can be used against VLMs and multimodal RAG."""

__version__ = "0.1.0"
