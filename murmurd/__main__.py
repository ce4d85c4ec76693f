from murmurd.cli import main

raise SystemExit(main())
