"""Chat templates for the tiny offline tokenizers, written to render what each family's published template renders
for one user turn (an image, then text) with the generation prompt.

They let the tests check that an adapter shows a model the same ``input_ids`` as the family's own transformers
processor would (``processor.apply_chat_template(..., tokenize=True)``): the template decides the text around the
image, the processor expands the image into its token run and decides the start token. Real checkpoints bring
their own templates; these are never used for them.
"""

NL = "{{ '\\n' }}"


def _parts(image: str, text: str = "{{ p['text'] }}") -> str:
    return (f"{{% for p in m['content'] %}}{{% if p['type'] == 'image' %}}{image}"
            f"{{% elif p['type'] == 'text' %}}{text}{{% endif %}}{{% endfor %}}")


def _chatml(default_system: str | None) -> str:
    system = (f"{{% if loop.first and m['role'] != 'system' %}}<|im_start|>system{NL}{default_system}<|im_end|>{NL}"
              "{% endif %}") if default_system else ""
    return (f"{{% for m in messages %}}{system}<|im_start|>{{{{ m['role'] }}}}{NL}"
            f"{{% if m['content'] is string %}}{{{{ m['content'] }}}}{{% else %}}"
            f"{_parts('<|vision_start|><|image_pad|><|vision_end|>')}{{% endif %}}<|im_end|>{NL}{{% endfor %}}"
            f"{{% if add_generation_prompt %}}<|im_start|>assistant{NL}{{% endif %}}")


# Qwen2-VL / Qwen2.5-VL: ChatML with the default system prompt; Qwen3-VL and Qwen3.5: no default system prompt.
QWEN2_VL = _chatml("You are a helpful assistant.")
QWEN3_VL = _chatml(None)

# LLaVA-1.5 (llava-hf): "USER: <image>\n<text> ASSISTANT:"; the tokenizer adds the start token.
LLAVA = ("{% for m in messages %}{% if m['role'] != 'system' %}{{ m['role'].upper() }}: {% endif %}"
         f"{{% for p in m['content'] if p['type'] == 'image' %}}<image>{NL}{{% endfor %}}"
         "{% for p in m['content'] if p['type'] == 'text' %}{{ p['text'] }} {% endfor %}{% endfor %}"
         "{% if add_generation_prompt %}ASSISTANT:{% endif %}")


TRIMMED = "{{ p['text'] | trim }}"


def _gemma(image: str) -> str:
    return ("{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' "
            f"else m['role'] }}}}{NL}{_parts(image, TRIMMED)}<end_of_turn>{NL}{{% endfor %}}"
            f"{{% if add_generation_prompt %}}<start_of_turn>model{NL}{{% endif %}}")


# Gemma 3: the start token in the template, the begin-of-image marker where the image goes.
GEMMA3 = _gemma("<start_of_image>")
# Gemma 4: the same turn markers; the processor expands the image token itself.
GEMMA4 = _gemma("<image_soft_token>")

# SmolVLM: "<|im_start|>User:<image><text><end_of_utterance>\nAssistant:" (the start token is the template's).
SMOLVLM = ("<|im_start|>{% for m in messages %}{{ m['role'] | capitalize }}"
           "{% if m['content'][0]['type'] == 'image' %}:{% else %}: {% endif %}"
           f"{_parts('<image>')}<end_of_utterance>{NL}{{% endfor %}}{{% if add_generation_prompt %}}Assistant:"
           "{% endif %}")

# DeepSeek-VL: its system prompt, then "User: <image_placeholder><text>\n\nAssistant:"; the tokenizer adds the
# start token.
DEEPSEEK_VL = ("You are a helpful language and vision assistant. You are able to understand the visual content "
               "that the user provides, and assist the user with a variety of tasks using natural language."
               f"{NL}{NL}{{% for m in messages %}}{{{{ m['role'] | capitalize }}}}: {_parts('<image_placeholder>')}"
               f"{NL}{NL}{{% endfor %}}{{% if add_generation_prompt %}}Assistant:{{% endif %}}")
