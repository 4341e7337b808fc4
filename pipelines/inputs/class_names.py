"""Names for integer labels (`--class-names FILE`: one name per line, line i naming label i, as
Fashion-MNIST's and CIFAR's lists are written).

An array's integer labels, a TFRecord's `image/class/label`, a WebDataset `.cls` and a label
column of integers are named by it (an integer it has no line for is `unknown_class`); without
it, the integer is the name.
"""

from imageshards import storage


class UnknownClass(ValueError):
    """An integer label that --class-names has no name for."""


class ClassNames:
    """The names of integer labels: --class-names, or the integers themselves."""

    def __init__(self, path=None):
        self.path = path
        self.names = None
        if path:
            text = storage.read_text(path, '--class-names')
            self.names = [line.strip() for line in text.splitlines() if line.strip()]
            if not self.names:
                raise ValueError(f'--class-names {path} holds no names (one name per line)')
            repeated = sorted({name for name in self.names if self.names.count(name) > 1})
            if repeated:
                raise ValueError(f'--class-names {path} names {repeated} more than once')

    def name(self, value) -> str:
        """The name of a label: an int (or a str of digits, with --class-names) by its line of
        --class-names, or as written; raises UnknownClass for one it has no line for."""
        if isinstance(value, str) and not (self.names and value.strip().isdigit()):
            return value.strip()
        number = int(value)
        if self.names is None:
            return str(number)
        if not 0 <= number < len(self.names):
            raise UnknownClass(
                f'label {number} has no name in --class-names {self.path} '
                f'({len(self.names)} names, for labels 0 to {len(self.names) - 1})'
            )
        return self.names[number]

    def named(self, labels):
        """A label, or a tuple of labels, with integers named by --class-names (as is
        without it)."""
        if self.names is None:
            return labels
        if isinstance(labels, tuple):
            return tuple(sorted({self.name(name) for name in labels}))
        return self.name(labels) if labels else labels
