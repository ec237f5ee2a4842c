"""Qwen-VL-Chat written natively (the release ships it only as remote code that reads image paths out of the
prompt): its configuration, vision tower and resampler, decoder, and tiktoken tokenizer with the chat format.
The family adapter is :mod:`mmaudit.models.hf.qwen_vl_chat`."""
