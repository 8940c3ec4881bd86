from mdindex.cli import main

raise SystemExit(main())
