from ckptview.cli import entry

entry()
