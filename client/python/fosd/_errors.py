"""fosd._errors: fosd.Error, raised for every status other than OK (from fosd, from libfos on
the client side, or from this package's own argument checks)."""

from . import _lib


class Error(Exception):
    """A failed call. .code: the status name ("NOT_FOUND", ...); .code_number: the gRPC number;
    .message: what went wrong, naming the field."""

    def __init__(self, code, message):
        self.code_number = int(code)
        self.code = _lib.CODE_NAMES.get(self.code_number, "CODE_%d" % self.code_number)
        self.message = message
        super().__init__("%s: %s" % (self.code, message))


def check(rc, st):
    """Raises Error for a libfos return code rc with status st (a _lib.Status)."""
    if rc:
        raise Error(rc, st.message.decode("utf-8", "replace"))
