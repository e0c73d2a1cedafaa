"""fosd._errors: fosd.Error, raised for every status other than OK (from fosd, from libfos on
the client side, or from this package's own argument checks), and fosd.AsyncError, the Error of an
earlier asynchronous call (libfos's FOS_CUDA_ORDER_ASYNC) reported by a later one or by
Client.synchronize: libfos's message then starts "asynchronous <Op> of ... (request <id>) failed:",
which error() recognises. Such a failure is never retried or taken for the current call's own."""

import re

from . import _lib

_ASYNC = re.compile(r"asynchronous (\w+)\b.*?\(request (\d+)\) failed")


class Error(Exception):
    """A failed call. .code: the status name ("NOT_FOUND", ...); .code_number: the gRPC number;
    .message: what went wrong, naming the field."""

    def __init__(self, code, message):
        self.code_number = int(code)
        self.code = _lib.CODE_NAMES.get(self.code_number, "CODE_%d" % self.code_number)
        self.message = message
        super().__init__("%s: %s" % (self.code, message))


class AsyncError(Error):
    """The failure of an earlier asynchronous call, raised by the next call through the client (which
    did not run) or by Client.synchronize. .op: the failed call's op ("Forward", "Backward", ...);
    .request_id: its request id; .code and .message as Error's (the message names both)."""

    def __init__(self, code, message, op, request_id):
        super().__init__(code, message)
        self.op = op
        self.request_id = request_id


def error(rc, message):
    """The Error (an AsyncError for an earlier asynchronous call's failure) of code rc."""
    m = _ASYNC.match(message)
    if m:
        return AsyncError(rc, message, m.group(1), int(m.group(2)))
    return Error(rc, message)


def is_async_failure(e):
    return isinstance(e, AsyncError)


def check(rc, st):
    """Raises the Error of a libfos return code rc with status st (a _lib.Status)."""
    if rc:
        raise error(rc, st.message.decode("utf-8", "replace"))
