from ckptview.cli import main

raise SystemExit(main())
