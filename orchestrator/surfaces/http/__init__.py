"""The HTTP surface: the session API, a resumable SSE mutation stream, and the AI SDK chat protocol.

```python
async with Runtime(store="sqlite:///troupe.db") as rt:
    app = create_app(rt, shopper, api_keys=["…"])
    await serve(app, host="0.0.0.0", port=8000)
```
"""

from orchestrator.surfaces.http.aisdk import MessageStream, run_output, to_ui_message, to_ui_messages
from orchestrator.surfaces.http.app import create_app, serve
from orchestrator.surfaces.http.chat import ChatTurn, Target

__all__ = [
    "ChatTurn",
    "MessageStream",
    "Target",
    "create_app",
    "run_output",
    "serve",
    "to_ui_message",
    "to_ui_messages",
]
