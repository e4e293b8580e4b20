from .weight_transfer import WeightTransferConfig  # noqa: F401
