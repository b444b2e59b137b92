"""serving.py overrides waitress' internals: the hooks it overrides must still be there in the
waitress installed (pyproject pins it below its next major; this says what a new one moved)."""

import inspect
import sys

from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.server import TcpWSGIServer
from waitress.task import ErrorTask, WSGITask

from gpustats import serving

# The base class, the hooks serving.py overrides on it, and the instance attributes it reads.
HOOKS = (
    (ErrorTask, serving._JsonErrorTask, ("execute",), ()),
    (HTTPRequestParser, serving._Parser, ("parse_header", "received"),
     ("headers", "content_length", "chunked", "error")),
    (HTTPChannel, serving._Channel, ("received", "readable", "writable"),
     ("last_activity", "requests", "request", "outbufs", "outbuf_lock", "will_close",
      "total_outbufs_len", "current_outbuf_count", "close_when_flushed", "sent_continue",
      "requests_lock", "server", "adj")),
    (WSGITask, serving._Task, ("finish", "service", "get_environment"),
     ("wrote_header", "status", "chunked_response", "close_on_finish")),
    (TcpWSGIServer, serving._Server, ("readable", "handle_accept", "maintenance"),
     ("active_channels", "in_connection_overflow", "next_channel_cleanup", "task_dispatcher",
      "effective_port", "effective_host", "channel_class", "adj",
      # Listeners.attach sets it after binding; a task reads it per request.
      "application")),
)


def test_every_overridden_hook_exists_on_its_waitress_base():
    for base, ours, methods, _ in HOOKS:
        assert issubclass(ours, base)
        for name in methods:
            assert name in vars(ours), (ours.__name__, name)          # we do override it
            assert callable(getattr(base, name, None)), f"waitress {base.__name__}.{name} is gone"


def test_the_instance_attributes_read_are_still_set_by_waitress():
    for base, _, _, attributes in HOOKS:
        source = "".join(inspect.getsource(sys.modules[cls.__module__]) for cls in base.__mro__
                         if cls.__module__.startswith("waitress"))
        for name in attributes:
            assert f"self.{name}" in source or name in vars(base), \
                f"waitress {base.__name__} no longer sets {name}"
