"""The safe pickle VM and what torch's pickles mean: opcodes interpreted, never executed; torch's
rebuild functions emulated; the census of every global a file names; the inert object graph turned into a tree."""
