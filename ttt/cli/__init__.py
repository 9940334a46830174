"""The `ttt` command line, a thin shell over functions users can call: one module per command group (`data`,
`expert`, `train`: pretrain, `evaluate`: eval, `run`: run and report), assembled in `app`."""

from ttt.cli.app import cli as cli
from ttt.cli.app import main as main
