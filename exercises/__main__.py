"""python -m exercises [any flag of text2grad.py]: the first look with the functions written so far
in exercises/student.py in place of the project's (exercises/README.md, E6). The core never imports
the exercises: this runner puts a student's functions in place (seam.py), then runs text2grad.py."""
import text2grad
from exercises import seam


def main(argv=None):
    print(seam.install_student())
    return text2grad.main(argv)


if __name__ == "__main__":
    main()
