"""One module (or sub-package, for a long paper) per paper or topic; importing it registers its theorems in
:data:`mlmix.verify.verdicts.REGISTRY`, in the paper's order.

:func:`mlmix.verify.runner.load_theorems` imports every module here in alphabetical order, so a new module is
picked up by ``mlmix verify`` without further wiring. The package re-exports nothing.
"""

__all__: list[str] = []
