"""kiln.optim: torch.optim's optimizers (SGD, Adam, AdamW, Adagrad, Adadelta, RMSprop,
LBFGS) and kiln.optim.lr_scheduler. optimizer.py describes the two update engines (the
fused C++ core of SGD / Adam / AdamW, and the Python update every optimizer has)."""

from . import lr_scheduler  # noqa: F401
from .adadelta import Adadelta  # noqa: F401
from .adagrad import Adagrad  # noqa: F401
from .adam import Adam, AdamW  # noqa: F401
from .lbfgs import LBFGS  # noqa: F401
from .optimizer import Optimizer  # noqa: F401
from .rmsprop import RMSprop  # noqa: F401
from .sgd import SGD  # noqa: F401
