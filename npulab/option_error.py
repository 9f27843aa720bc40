"""The error an option of a typed options dataclass raises (:class:`OptionError`): kept apart
from :mod:`npulab.pipeline` so the modules the pipeline runs can raise it too."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["OptionError", "literal"]


class OptionError(ValueError):
    """A field of a typed options dataclass (:class:`RunOptions`,
    :class:`npulab.map_run.MapOptions`) with a value that is not allowed, or set where the
    chip's kind or the timing mode does not read it (it would otherwise be silently ignored).

    ``option`` names the field (a compiler choice as ``"compile.loop_order"``) and ``value``
    is its value. The rule is written once, where it is checked; ``str(error)`` words it with
    the fields as the Python API spells them, :meth:`words` with other names (the command
    line's flags), so each caller can say it in its own terms.
    """

    def __init__(self, option: str, value, text: str,
                 refs: dict[str, tuple[str, object]] | None = None):
        #: ``text`` is a :meth:`str.format` template: ``{}`` is the option, ``{name}`` the
        #: setting ``refs[name] = (field, value)`` it mentions (another option or a config key).
        self.option, self.value, self.text, self.refs = option, value, text, refs or {}
        super().__init__(self.words(lambda o, v: f"{o} = {v!r}", lambda f, v: f"{f} = {v}"))

    def __reduce__(self):       # sweeps send errors between processes
        return type(self), (self.option, self.value, self.text, self.refs)

    def words(self, subject: Callable[[str, object], str],
              mention: Callable[[str, object], str]) -> str:
        """The message with ``subject(option, value)`` naming the option and
        ``mention(field, value)`` naming each setting it refers to."""
        return self.text.format(subject(self.option, self.value),
                                **{name: mention(*ref) for name, ref in self.refs.items()})


def literal(text: str) -> str:
    """``text`` written into an :class:`OptionError` template as it is (braces doubled)."""
    return str(text).replace("{", "{{").replace("}", "}}")
