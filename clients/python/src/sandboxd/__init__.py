"""sandboxd: run AI-generated Python in locked-down sandboxes, and read the
web as untrusted text, from Python.

::

    import sandboxd

    with sandboxd.Client("http://127.0.0.1:8080", api_key="sbx_...") as client:
        r = client.run("print(6 * 7)")
        print(r.status, r.stdout)          # ok 42

        with client.session(profile="data") as s:
            s.run("import pandas as pd; df = pd.DataFrame({'n': [1, 4, 9]})")
            print(s.run("df.describe()").tables[0])

        tools = client.tools(format="openai")          # for the model
        reply = client.handle_tool_call("run_python", '{"language": "python", "code": "print(1)"}',
                                        format="openai", call_id="call_1")

Errors are exceptions named after the API's typed codes
(:mod:`sandboxd.errors`); results are dataclasses (:mod:`sandboxd.types`).
The reference is docs/python.md in the sandboxd repository.
"""

from ._http import RetryPolicy
from ._schema import SchemaError
from .aio import AsyncClient, AsyncExecution, AsyncSession
from .client import Client, Execution, Session
from .errors import *  # noqa: F401,F403
from .errors import __all__ as _errors_all
from .tools import RESULT_FORMATS, TOOL_FORMATS
from .types import *  # noqa: F401,F403
from .types import __all__ as _types_all

__version__ = "0.1.0"

__all__ = [
    "Client",
    "AsyncClient",
    "Session",
    "AsyncSession",
    "Execution",
    "AsyncExecution",
    "RetryPolicy",
    "SchemaError",
    "TOOL_FORMATS",
    "RESULT_FORMATS",
    *_errors_all,
    *_types_all,
]
