"""One module per component type (a source, sink or window kind): its config class and
``build()``, registered in :mod:`sluice.spec.registry`."""
