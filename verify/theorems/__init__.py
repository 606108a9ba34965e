"""One module per paper; importing a module registers its theorems in :data:`mlmix.verify.verdicts.REGISTRY`.

:func:`mlmix.verify.runner.load_theorems` imports every module here, so a new module is picked up by
``mlmix verify`` without further wiring.
"""
