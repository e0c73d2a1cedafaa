"""fosd: the Python client of fosd, NVFP4 four-over-six matmuls as a service.

    import fosd
    with fosd.connect() as c:                 # $FOS_SERVER, else ipc:///tmp/fosd.sock
        c.put_weight("layer0", w)             # w (N, K): torch bf16/float32 or numpy
        y, ctx = c.forward("layer0", x, save_context=True)
        dx, dw, db = c.backward(ctx, dy)

fosd.Recipe is a layer's numerics options as one value; fosd.torch has the PyTorch layer
(fosd.torch.Linear, linear, convert, unconvert, unquantized). The package is pure Python
over libfos.so (client/libfos/fos.h) through ctypes; fosd._lib says where the library is looked for.
"""

from ._errors import AsyncError, Error
from ._mps import PerformanceWarning
from ._recipe import Recipe
from .client import Client, Context, WeightInfo, connect

__all__ = ["AsyncError", "Client", "Context", "Error", "PerformanceWarning", "Recipe", "WeightInfo", "connect",
           "default_client", "synchronize", "__version__"]
__version__ = "0.2.0"

_default = None


def default_client():
    """The process's shared Client (connected on first use with fosd.connect()'s defaults);
    fosd.torch layers use it when given no client. A closed one is replaced."""
    global _default
    if _default is None or _default.closed:
        _default = connect()
    return _default


def synchronize(client=None):
    """Waits for the asynchronous calls of client (default: the default client, when one is
    connected) and raises the first failure not yet reported (fosd.AsyncError); see
    Client.synchronize. The package's sync point besides torch.cuda.synchronize()."""
    c = client if client is not None else _default
    if c is not None and not c.closed:
        c.synchronize()


def set_default_client(client):
    """Makes client the one default_client() returns (None: connect again on next use)."""
    global _default
    _default = client
