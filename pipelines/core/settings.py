"""The build's settings, each a frozen record written once: what a step is handed of the
build's flags, so that a setting travels as one value instead of an argument list.

    ResizeSpec   --resize-shorter-side and --resize-quality (pipelines/validation/resize.py
                 applies it)
"""

import dataclasses

DEFAULT_QUALITY = 90  # --resize-quality's default (bench/RESULTS.md measures PSNR and size)


@dataclasses.dataclass(frozen=True)
class ResizeSpec:
    """A build's --resize-shorter-side and --resize-quality."""

    shorter_side: int
    quality: int = DEFAULT_QUALITY

    def describe(self) -> dict:
        """dataset.json's `resize`: the setting, and how it is applied."""
        return {
            'shorter_side': self.shorter_side,
            'quality': self.quality,
            'filter': 'lanczos',
            'jpeg': 'baseline, 4:2:0, optimized Huffman tables',
            'png': 'images with alpha, a palette or 1-bit pixels',
        }
