"""The one verification harness: operands and the float64 reference (:mod:`.operands`), the
NaN-poisoned run and the error check (:mod:`.checks`), timers (:mod:`.timing`) and torch's own
convolution timed as the baseline (:mod:`.cudnn`). The tuner, ``verify``, ``tools/gpu_check.py`` and
the tests all use these, so what one of them accepts is what the others accept."""
