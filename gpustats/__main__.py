from gpustats.cli import main

raise SystemExit(main())
