"""The kernel modules: each registers its algorithms in ``ALGORITHMS`` when imported."""

import importlib

#: the modules with @triton.jit kernels of their own; ``relayout``, which delegates to them, comes
#: after (``factory.load_kernel_modules``)
KERNEL_MODULES = ("bwd_data_cfirst", "bwd_data_igemm", "bwd_data_pointwise", "bwd_data_tma", "bwd_weight_bdring",
                  "bwd_weight_bdstride", "bwd_weight_cfirst", "bwd_weight_igemm", "bwd_weight_padvec",
                  "bwd_weight_padx", "bwd_weight_pointwise", "bwd_weight_rowstack", "bwd_weight_shift",
                  "bwd_weight_tapshare",
                  "bwd_weight_tma", "depthwise_plane", "depthwise_plane_data", "depthwise_roll", "depthwise_slab",
                  "depthwise_slide", "depthwise_stream", "depthwise_taps", "depthwise_tile", "depthwise_wgrad",
                  "direct_grouped", "grouped_blockdiag", "grouped_roll", "grouped_rows", "grouped_taps",
                  "grouped_window")


def import_kernel_modules() -> None:
    """Import every module of :data:`KERNEL_MODULES` (each registers its algorithms once)."""
    for name in KERNEL_MODULES:
        importlib.import_module(f"{__name__}.{name}")
