"""Chat messages -> the one prompt string the engine decodes. Every message is rendered, whatever its
role: with the checkpoint's chat template where its tokenizer has one, else in the plain format below
(docs/SERVING.md, "Chat prompts")."""
from __future__ import annotations

from orl.serve.protocol import APIError, Message


def turns(messages: list[Message]) -> list[dict]:
    # "developer" is OpenAI's newer name for "system"; chat templates know only the older one
    return [{"role": "system" if m.role == "developer" else m.role, "content": m.content} for m in messages]


def plain_chat(messages: list[dict]) -> str:
    """One line per turn: a user turn as it is (the tiny task models are prompted with the task text
    itself, so a lone user message is exactly its content), any other turn as `role: content`."""
    return "\n".join(t["content"] if t["role"] == "user" else f"{t['role']}: {t['content']}" for t in messages)


def render_chat(tokenizer, messages: list[Message]) -> str:
    if not getattr(tokenizer, "chat_template", None):
        return plain_chat(turns(messages))
    try:
        return tokenizer.apply_chat_template(turns(messages))
    except Exception as e:  # a template may refuse a conversation (jinja2 errors, raise_exception): the request's fault
        raise APIError(400, f"the checkpoint's chat template refused these messages: {type(e).__name__}: {e}",
                       param="messages", code="invalid_messages") from e
